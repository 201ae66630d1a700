package events_test

import (
	"context"
	"testing"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestEndpointsPages: the endpoints list pages newest first, each
// endpoint once, and refuses a cursor no list returned.
func TestEndpointsPages(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	ops := events.NewOps(db, nil, allowPrivate)
	var want []string
	for _, path := range []string{"/a", "/b", "/c", "/d", "/e"} {
		want = append([]string{endpoint(t, ops, acme.ID, "http://127.0.0.1:9"+path, events.EndpointInput{}).Endpoint.ID}, want...)
	}
	es := events.NewStore(db)
	var got []string
	pr := page.Request{Limit: 2}
	for {
		pg, err := es.Endpoints(ctx, acme.ID, pr)
		testenv.Must(t, err)
		for _, e := range pg.Items {
			got = append(got, e.ID)
		}
		if pg.NextCursor == nil {
			break
		}
		pr.Cursor = *pg.NextCursor
	}
	if len(got) != len(want) {
		t.Fatalf("paged %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("paged %v, want %v (newest first)", got, want)
			break
		}
	}
	if _, err := es.Endpoints(ctx, acme.ID, page.Request{Limit: 2, Cursor: "eyJ0IjoiMjAyNi0wMS0wMVQwMDowMDowMFoiLCJpIjoieCJ9"}); testenv.Fields(err)["cursor"] == "" {
		t.Errorf("a cursor naming no endpoint: %v, want the cursor refused", err)
	}
}
