package tenants

import (
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
)

func TestRotateKeyInputValidate(t *testing.T) {
	tests := []struct {
		graceS int64
		ok     bool
	}{
		{0, true},
		{3600, true},
		{maxGracePeriodS, true},
		{-1, false},
		{maxGracePeriodS + 1, false},
		// time.Duration(18446744074) * time.Second wraps to about 0.29 s.
		{18446744074, false},
		{1 << 62, false},
	}
	for _, tt := range tests {
		g := tt.graceS
		req := RotateKeyInput{GracePeriodS: &g}
		err := req.Validate()
		if got := err == nil; got != tt.ok {
			t.Errorf("grace_period_s %d: Validate() = %v, want ok %v", g, err, tt.ok)
			continue
		}
		if err != nil && testenv.Fields(err)["grace_period_s"] == "" {
			t.Errorf("grace_period_s %d: %v does not name grace_period_s", g, err)
		}
	}
}
