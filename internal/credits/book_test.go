package credits

import "testing"

// TestRefundMarginIsTheDrainers: a refund keeps out of the grants the
// drainer no longer reserves escrow from, by one margin.
func TestRefundMarginIsTheDrainers(t *testing.T) {
	if got := NewDrainer(nil, nil, DrainerConfig{}).cfg.Margin; got != refundMargin {
		t.Errorf("the drainer's default margin is %v, refundMargin %v", got, refundMargin)
	}
}
