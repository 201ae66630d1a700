package enforce

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSettleFindsARecordOfTheLegacyLayout: a hold of a tenant whose hash
// tag is 0x80 or more, opened before records were written under the
// states' one-byte tag, is settled at its old key.
func TestSettleFindsARecordOfTheLegacyLayout(t *testing.T) {
	ctx := context.Background()
	store := limiter.NewMemoryStore(nil)
	holder := snapshot.NewHolder(snapshot.DataSource{Data: func() snapshot.Data { return snapshot.Data{} }}, nil)
	c := NewChecker(holder, store, CheckerConfig{Prefix: "tg:"})
	const tag = byte(0xae)
	id := newHoldID(tag, &Decision{TenantID: "tenant-1", KeyID: "key-1", Tier: "authenticated"}, Request{})
	legacy := statekey.LegacyHoldKey("tg:", tag, id)
	params := limiter.Params{Algorithm: limiter.GCRA, Limit: 100, PeriodUS: limiter.HourUS, Burst: 100}
	state := string(statekey.AppendKey(nil, "tg:", tag, [3]byte{1, 2, 3}, []byte("short"), nil))
	out, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: state, Params: params}}, Cost: 60,
		Hold: &limiter.Hold{ID: id, Key: legacy, TTLUS: limiter.HourUS}})
	testenv.Must(t, err)
	if !out.Admitted {
		t.Fatal("the hold was not admitted")
	}
	st, err := c.Settle(ctx, id, 10)
	testenv.Must(t, err)
	if st.Status != "settled" || st.Cost != 10 || st.Estimate != 60 {
		t.Errorf("settlement %+v, want 60 settled at 10", st)
	}
}
