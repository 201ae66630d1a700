package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestCreditsCommandsIdempotencyKey: `credits grant` and `credits adjust`
// run again with the same --idempotency-key and values change nothing and
// print the first change; with other values the key is refused; a key
// that is not one is refused naming the flag; without the flag every run
// is a change of its own.
func TestCreditsCommandsIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	db := openPool(t, url)
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "prepaid"})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	count := func(query string) int {
		t.Helper()
		var n int
		testenv.Must(t, db.QueryRow(ctx, query, tn.ID).Scan(&n))
		return n
	}
	grants := func() int { return count(`SELECT count(*) FROM credit_grants WHERE tenant_id = $1`) }
	audited := func() int {
		return count(`SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action IN ('credits.grant', 'credits.adjust')`)
	}

	grant := []string{"credits", "grant", "--tenant", "acme", "--amount", "500", "--cause", "March pack", "--idempotency-key", "order-4711"}
	first, err := admin(t, url, grant...)
	testenv.Must(t, err)
	again, err := admin(t, url, grant...)
	testenv.Must(t, err)
	var g struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(first), &g); err != nil || g.ID == "" || again != first {
		t.Errorf("grant printed %q, then %q; want the same grant twice (%v)", first, again, err)
	}
	if n, a := grants(), audited(); n != 1 || a != 1 {
		t.Errorf("%d grants, %d audit entries after two runs with one key; want 1", n, a)
	}
	other := append(grant[:len(grant):len(grant)], "--priority", "5")
	if _, err := admin(t, url, other...); err == nil || !strings.Contains(err.Error(), "Idempotency-Key") {
		t.Errorf("the key with another priority: %v, want it refused for the key", err)
	}

	adjust := []string{"credits", "adjust", "--tenant", "acme", "--units", "-30", "--cause", "correction", "--idempotency-key", "fix-1"}
	firstAdj, err := admin(t, url, adjust...)
	testenv.Must(t, err)
	againAdj, err := admin(t, url, adjust...)
	testenv.Must(t, err)
	if !strings.Contains(firstAdj, `"balance": 470`) || againAdj != firstAdj {
		t.Errorf("adjust printed %q, then %q; want the balance of 470 twice", firstAdj, againAdj)
	}

	for _, key := range []string{strings.Repeat("k", 201), "clé"} {
		if _, err := admin(t, url, "credits", "grant", "--tenant", "acme", "--amount", "1", "--idempotency-key", key); err == nil ||
			!strings.Contains(err.Error(), "idempotency-key") {
			t.Errorf("--idempotency-key %q: %v, want it refused naming the flag", key, err)
		}
	}
	for range 2 {
		_, err := admin(t, url, "credits", "grant", "--tenant", "acme", "--amount", "1")
		testenv.Must(t, err)
	}
	if n, a := grants(), audited(); n != 3 || a != 4 {
		t.Errorf("%d grants, %d audit entries; want 3 grants (two without a key) and 4 entries", n, a)
	}
	if n := count(`SELECT count(*) FROM credit_idempotency_keys WHERE tenant_id = $1 AND key LIKE 'cli-%'`); n != 2 {
		t.Errorf("%d random keys kept, want one per run without the flag (2)", n)
	}

	// With a key, --expires is a time: a duration from now would be
	// another time on every run, and the rerun a conflict.
	relative := append(grant[:len(grant):len(grant)], "--expires", "720h")
	if _, err := admin(t, url, relative...); err == nil || !strings.Contains(err.Error(), "expires") || !strings.Contains(err.Error(), "RFC 3339") {
		t.Errorf("--expires 720h with a key: %v, want it refused naming expires", err)
	}
	dated := []string{"credits", "grant", "--tenant", "acme", "--amount", "5", "--cause", "dated", "--idempotency-key", "dated-1",
		"--expires", time.Now().Add(720 * time.Hour).UTC().Format(time.RFC3339)}
	firstDated, err := admin(t, url, dated...)
	testenv.Must(t, err)
	if againDated, err := admin(t, url, dated...); err != nil || againDated != firstDated {
		t.Errorf("a dated grant run twice with one key: %q, %v; want the first grant again", againDated, err)
	}
}
