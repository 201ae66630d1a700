package client

import (
	"context"
	"testing"
	"time"
)

func TestHoldEndsWhenTheCallerGoesAway(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if hold(ctx, time.Hour) {
		t.Error("hold = true for a request whose context ended, want false")
	}
	if !hold(context.Background(), time.Microsecond) {
		t.Error("hold = false after the delay, want true")
	}
}
