package events_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEndpointEmptyListsMeanAll: "event_types": [] and "tenant_ids": []
// say "every type" and "every tenant", as leaving them out does; the
// endpoint is made and shows them as empty lists.
func TestEndpointEmptyListsMeanAll(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	ops := events.NewOps(db, nil, events.Guard{})
	for _, tt := range []struct {
		name, owner string
		in          events.EndpointInput
	}{
		{"operator, both empty", "", events.EndpointInput{EventTypes: []string{}, TenantIDs: []string{}}},
		{"tenant, no event types", acme.ID, events.EndpointInput{EventTypes: []string{}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.URL = "https://hooks.example.com/" + strings.ReplaceAll(tt.name, " ", "-")
			got, err := ops.CreateEndpoint(ctx, audit.CLI, tt.owner, in)
			if err != nil {
				t.Fatalf("CreateEndpoint: %v (code %s), want the endpoint made", err, tollgate.ErrorCode(err))
			}
			b, err := json.Marshal(got.Endpoint)
			testenv.Must(t, err)
			var shown map[string]any
			testenv.Must(t, json.Unmarshal(b, &shown))
			for _, field := range []string{"event_types", "tenant_ids"} {
				if l, ok := shown[field].([]any); !ok || len(l) != 0 {
					t.Errorf("%s = %v, want []", field, shown[field])
				}
			}
		})
	}
}

// TestGuardReadsHostsAsTheResolverDoes: a host that the system's resolver
// reads as an IPv4 address (inet_aton's shortened, decimal, octal and
// hexadecimal forms, or a trailing dot) is checked as that address when
// an endpoint is made, as the dial-time check would: refused, naming the
// url field, when it is loopback or private.
func TestGuardReadsHostsAsTheResolverDoes(t *testing.T) {
	ctx := context.Background()
	strict := events.Guard{}
	for _, u := range []string{
		"http://127.1:8080/", "http://127.0.1/", "http://2130706433:8080/", "http://127.0.0.1.:8080/",
		"http://0x7f.0.0.1/", "http://0x7f000001/", "http://0177.0.0.1/", "http://017700000001/",
		"http://127.1./", "http://10.1/", "http://192.168.257/", "http://0/", "http://169.254.43518/",
	} {
		if why := strict.CheckURL(ctx, u); why == "" {
			t.Errorf("CheckURL(%q) accepted it", u)
		}
	}
	// Public addresses in the same forms are addresses too, and accepted
	// (134744072 is 8.8.8.8).
	for _, u := range []string{"http://134744072/", "http://8.8.8.8./", "http://0x8.0x8.0x8.0x8/"} {
		if why := strict.CheckURL(ctx, u); why != "" {
			t.Errorf("CheckURL(%q) = %q, want it accepted", u, why)
		}
	}

	db, acme, _ := setup(t)
	ops := events.NewOps(db, nil, strict)
	for _, u := range []string{"http://127.1:9000/", "http://2130706433:9000/", "http://127.0.0.1.:9000/"} {
		_, err := ops.CreateEndpoint(ctx, audit.CLI, acme.ID, events.EndpointInput{URL: u})
		if tollgate.ErrorCode(err) != tollgate.EINVALID || testenv.Fields(err)["url"] == "" {
			t.Errorf("CreateEndpoint(%s) = %v, want the url field refused", u, err)
		}
	}
}
