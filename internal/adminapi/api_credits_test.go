package adminapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// answer is a response: status, headers and body.
type answer struct {
	status int
	header http.Header
	body   string
}

// problemFields returns the fields a problem+json answer names.
func (a answer) problemFields(t *testing.T) map[string]string {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%d answered as %q, want application/problem+json", a.status, ct)
	}
	var p struct {
		Errors map[string]string `json:"errors"`
	}
	_ = json.Unmarshal([]byte(a.body), &p)
	return p.Errors
}

// send posts body as JSON with token and the Idempotency-Key header set
// to each of keys (none for none).
func send(t *testing.T, url, token, body string, keys ...string) answer {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	testenv.Must(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	testenv.Must(t, err)
	return answer{res.StatusCode, res.Header, string(b)}
}

// creditsAdmin serves the admin routes with an operator signed in and a
// tenant; it returns the tenant's credits URL, the operator's token, the
// database and the tenant's ID.
func creditsAdmin(t *testing.T) (credits, token string, db *pgxpool.Pool, tenantID string) {
	t.Helper()
	ctx := context.Background()
	url, password, db := newAdminDB(t)
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "prepaid"})
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	_, login := post(t, url+"/api/v1/login", "", `{"email": "ops@example.com", "password": "`+password+`"}`)
	token, _ = login["token"].(string)
	return url + "/api/v1/tenants/" + tn.ID + "/credits", token, db, tn.ID
}

func countOf(t *testing.T, db *pgxpool.Pool, query, tenantID string) int {
	t.Helper()
	var n int
	testenv.Must(t, db.QueryRow(context.Background(), query, tenantID).Scan(&n))
	return n
}

// TestCreditsGrantIdempotencyKey: a grant retried with its Idempotency-Key
// is answered as the first was (201, the same grant and Location) with
// Idempotent-Replayed: true, and grants once (one ledger row, one audit
// entry); the key with another body is a 409 naming it; without a key
// every request grants.
func TestCreditsGrantIdempotencyKey(t *testing.T) {
	credits, token, db, tenantID := creditsAdmin(t)
	body := `{"amount": 500, "expires_at": "2999-01-01T00:00:00Z", "cause": "March pack"}`
	first := send(t, credits+"/grants", token, body, "order-4711")
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first grant: %d %v %s, want 201 not replayed", first.status, first.header, first.body)
	}
	for i := range 2 {
		again := send(t, credits+"/grants", token, body, "order-4711")
		if again.status != http.StatusCreated || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" ||
			again.header.Get("Location") != first.header.Get("Location") {
			t.Errorf("retry %d: %d %v %s; want 201 %s, Idempotent-Replayed: true", i+1, again.status, again.header, again.body, first.body)
		}
	}
	grants := func() int {
		return countOf(t, db, `SELECT count(*) FROM credit_grants WHERE tenant_id = $1`, tenantID)
	}
	audited := func(action string) int {
		return countOf(t, db, `SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = '`+action+`'`, tenantID)
	}
	if g, rows, a := grants(), countOf(t, db, `SELECT count(*) FROM credit_ledger WHERE tenant_id = $1`, tenantID),
		audited("credits.grant"); g != 1 || rows != 1 || a != 1 {
		t.Errorf("%d grants, %d ledger rows, %d audit entries after three requests with one key; want 1 of each", g, rows, a)
	}

	other := send(t, credits+"/grants", token, `{"amount": 5000, "cause": "March pack"}`, "order-4711")
	if other.status != http.StatusConflict || other.problemFields(t)["Idempotency-Key"] == "" {
		t.Errorf("the key with another body: %d %s, want 409 naming Idempotency-Key", other.status, other.body)
	}
	for range 2 {
		if res := send(t, credits+"/grants", token, `{"amount": 1, "cause": "no key"}`); res.status != http.StatusCreated {
			t.Errorf("without a key: %d %s", res.status, res.body)
		}
	}
	if g := grants(); g != 3 {
		t.Errorf("%d grants, want 3: the keyed one and two without a key", g)
	}
}

// TestCreditsAdjustIdempotencyKey: an adjustment retried with its key is
// answered 200 with the first answer (the balance it left) and adjusts
// once; a grant's key is a 409 on an adjustment.
func TestCreditsAdjustIdempotencyKey(t *testing.T) {
	credits, token, db, tenantID := creditsAdmin(t)
	if res := send(t, credits+"/grants", token, `{"amount": 100, "cause": "pack"}`, "g1"); res.status != http.StatusCreated {
		t.Fatalf("grant: %d %s", res.status, res.body)
	}
	body := `{"units": -30, "cause": "correction"}`
	first := send(t, credits+"/adjustments", token, body, "a1")
	if first.status != http.StatusOK || !strings.Contains(first.body, `"balance":70`) {
		t.Fatalf("first adjustment: %d %s, want 200 with a balance of 70", first.status, first.body)
	}
	again := send(t, credits+"/adjustments", token, body, "a1")
	if again.status != http.StatusOK || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: %d %v %s, want 200 %s replayed", again.status, again.header, again.body, first.body)
	}
	if res := send(t, credits+"/adjustments", token, body, "g1"); res.status != http.StatusConflict || res.problemFields(t)["Idempotency-Key"] == "" {
		t.Errorf("an adjustment with the grant's key: %d %s, want 409 naming Idempotency-Key", res.status, res.body)
	}
	if n := countOf(t, db, `SELECT count(*) FROM audit_log WHERE tenant_id = $1 AND action = 'credits.adjust'`, tenantID); n != 1 {
		t.Errorf("%d credits.adjust audit entries, want 1", n)
	}
	if n := countOf(t, db, `SELECT (line - consumed)::int FROM credit_accounts WHERE tenant_id = $1`, tenantID); n != 70 {
		t.Errorf("balance %d, want 70", n)
	}
}

// TestCreditsBadIdempotencyKey: a key that is empty, sent twice, too long
// or not printable ASCII is a 422 problem naming Idempotency-Key, and
// changes nothing.
func TestCreditsBadIdempotencyKey(t *testing.T) {
	credits, token, db, tenantID := creditsAdmin(t)
	for name, keys := range map[string][]string{
		"empty":     {""},
		"twice":     {"a", "b"},
		"too long":  {strings.Repeat("k", 201)},
		"non-ASCII": {"clé"},
	} {
		for path, body := range map[string]string{"/grants": `{"amount": 10, "cause": "pack"}`, "/adjustments": `{"units": 10, "cause": "pack"}`} {
			res := send(t, credits+path, token, body, keys...)
			if res.status != http.StatusUnprocessableEntity || res.problemFields(t)["Idempotency-Key"] == "" {
				t.Errorf("%s key on %s: %d %s, want 422 naming Idempotency-Key", name, path, res.status, res.body)
			}
		}
	}
	if res := send(t, credits+"/grants", token, `{"amount": 10, "cause": "pack"}`, strings.Repeat("~", 200)); res.status != http.StatusCreated {
		t.Errorf("a key of 200 characters: %d %s, want 201", res.status, res.body)
	}
	if n := countOf(t, db, `SELECT count(*) FROM credit_ledger WHERE tenant_id = $1`, tenantID); n != 1 {
		t.Errorf("%d ledger rows, want 1", n)
	}
}

// TestCreditsGrantsWithOneKeyAtOnce: requests with one key that arrive
// together grant once, and every one answers that grant.
func TestCreditsGrantsWithOneKeyAtOnce(t *testing.T) {
	credits, token, db, tenantID := creditsAdmin(t)
	const n = 8
	answers := make([]answer, n)
	testenv.AtOnce(n, func(i int) {
		answers[i] = send(t, credits+"/grants", token, `{"amount": 250, "cause": "pack"}`, "retry-storm")
	})
	replayed := 0
	for i, a := range answers {
		if a.status != http.StatusCreated || a.body != answers[0].body {
			t.Errorf("request %d: %d %s, want 201 %s", i, a.status, a.body, answers[0].body)
		}
		if a.header.Get("Idempotent-Replayed") == "true" {
			replayed++
		}
	}
	if replayed != n-1 {
		t.Errorf("%d answers replayed, want %d", replayed, n-1)
	}
	if g := countOf(t, db, `SELECT count(*) FROM credit_grants WHERE tenant_id = $1`, tenantID); g != 1 {
		t.Errorf("%d grants, want 1", g)
	}
}
