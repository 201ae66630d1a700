package metering

import (
	"math"
	"testing"
)

func TestDecodeRejectsTextPostgresCannotStore(t *testing.T) {
	minute := int64(1_795_000_020)
	for name, b := range map[string]Batch{
		"NUL in resource":  {Version: 1, ID: "x", Rows: []Row{{Minute: minute, TenantID: tA, KeyID: kA, Tier: "authenticated", Resource: "GET /\x00", Reason: "ok", Counts: Counts{Allowed: 1}}}},
		"bad UTF-8 reason": {Version: 1, ID: "x", Rows: []Row{{Minute: minute, Tier: "anonymous", Resource: "*", Reason: "\xff", Counts: Counts{Allowed: 1}}}},
		"NUL in IP":        {Version: 1, ID: "x", IPs: []IPRow{{Minute: minute, IP: "1.2.3.4\x00", Counts: Counts{Allowed: 1}}}},
		"huge count":       {Version: 1, ID: "x", Rows: []Row{{Minute: minute, TenantID: tA, KeyID: kA, Tier: "authenticated", Resource: "GET /", Reason: "ok", Counts: Counts{Allowed: math.MaxInt64}}}},
	} {
		if err := b.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
