package demo

import (
	"context"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// TestDemoWebhooksStayOnTheMachine: every webhook endpoint the demo
// leaves enabled points at a loopback address, never at a name or a
// public address, also in a database an earlier seed left endpoints at a
// public name in; the demo has such endpoints, for the operator and for
// demo-pro, so that the console shows deliveries.
func TestDemoWebhooksStayOnTheMachine(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, es *events.Store)
	}{
		{"fresh", func(*testing.T, *events.Store) {}},
		{"after an earlier seed", func(t *testing.T, es *events.Store) {
			testenv.Must(t, es.EnsureEndpoint(ctx, "", earlierDemoWebhookURL, "demo: every event (no receiver)", time.Now()))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := testenv.DB(t)
			es := events.NewStore(db)
			tt.setup(t, es)
			for range 2 { // idempotent
				_, err := Seed(ctx, db, audit.CLI, testkeys.SecretKeys(t))
				testenv.Must(t, err)
			}
			list, err := es.Endpoints(ctx, "", page.Request{Limit: 100})
			testenv.Must(t, err)
			owners := map[bool]bool{} // by whether a tenant owns it
			for _, e := range list.Items {
				if e.DisabledAt != nil {
					continue
				}
				u, err := url.Parse(e.URL)
				testenv.Must(t, err)
				if ip, err := netip.ParseAddr(u.Hostname()); err != nil || !ip.IsLoopback() {
					t.Errorf("enabled demo endpoint %s: its host is not a loopback address", e.URL)
				}
				owners[e.TenantID != ""] = true
			}
			if !owners[false] || !owners[true] {
				t.Errorf("enabled endpoints of an operator %v, of a tenant %v; want both", owners[false], owners[true])
			}
		})
	}
}
