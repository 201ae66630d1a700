package client_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// fakeCheck stands in for POST /v1/check in examples and tests, with the
// contract's shapes and none of its maths: each caller (its key, else its
// ip) may spend limit units per resource, then is denied with a wait of
// retryAfterMS. Keys "tg_invalid", "tg_revoked" and "tg_suspended" are
// denied as their names say; any other key is a pro tenant's.
type fakeCheck struct {
	token        string
	limit        int64
	retryAfterMS int64

	mu    sync.Mutex
	used  map[string]int64
	calls int
	last  map[string]any // the last request body
}

func newFakeCheck(token string, limit, retryAfterMS int64) *fakeCheck {
	return &fakeCheck{token: token, limit: limit, retryAfterMS: retryAfterMS, used: map[string]int64{}}
}

// Calls returns how many checks reached the fake.
func (f *fakeCheck) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Last returns the body of the last check that reached the fake.
func (f *fakeCheck) Last() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

// resetAt is the X-RateLimit-Reset of every answer: a fixed instant keeps
// examples' output stable.
const resetAt = 1798761600

func (f *fakeCheck) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/check" {
		writeTestProblem(w, http.StatusNotFound, "not_found", "no such endpoint", nil)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-check"`)
		writeTestProblem(w, http.StatusUnauthorized, "unauthorized", "a valid service token is required", nil)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeTestProblem(w, http.StatusBadRequest, "malformed", "malformed request body", map[string]string{"body": "invalid JSON"})
		return
	}
	key, _ := body["key"].(string)
	ip, _ := body["ip"].(string)
	resource, _ := body["resource"].(string)
	cost := int64(1)
	if c, ok := body["cost"].(float64); ok {
		cost = int64(c)
	}
	if key == "" && ip == "" {
		writeTestProblem(w, http.StatusUnprocessableEntity, "invalid", "the request has invalid fields", map[string]string{"ip": "is required when key is absent"})
		return
	}
	f.mu.Lock()
	f.calls++
	f.last = body
	d := map[string]any{"allowed": true, "reason": "ok", "tier": "anonymous", "retry_after_ms": 0, "degraded": false, "rules": []any{}}
	switch key {
	case "tg_invalid":
		d["allowed"], d["reason"], d["tier"] = false, "invalid_key", "authenticated"
	case "tg_revoked":
		d["allowed"], d["reason"], d["tier"] = false, "key_revoked", "authenticated"
	case "tg_suspended":
		d["allowed"], d["reason"], d["tier"] = false, "tenant_suspended", "authenticated"
	default:
		caller := "ip:" + ip
		if key != "" {
			caller = "key:" + key
			d["tier"], d["plan"], d["tenant_id"], d["key_id"] = "authenticated", "pro", "t-1", "k-1"
		}
		caller += " " + resource
		used := f.used[caller]
		if used+cost <= f.limit {
			f.used[caller] = used + cost
			used += cost
		} else {
			d["allowed"], d["reason"], d["retry_after_ms"] = false, "rate_limited", f.retryAfterMS
		}
		remaining := f.limit - used
		d["limit"], d["remaining"], d["reset_after_ms"], d["policy"] = f.limit, remaining, 1800_000, "hourly"
		d["rules"] = []any{map[string]any{"name": "hourly", "algorithm": "fixed_window", "mode": "enforce",
			"limit": f.limit, "window_s": 3600, "allowed": d["allowed"], "remaining": remaining,
			"reset_after_ms": 1800_000, "retry_after_ms": d["retry_after_ms"]}}
		h := w.Header()
		h.Set("RateLimit-Policy", `"hourly";q=`+strconv.FormatInt(f.limit, 10)+";w=3600")
		h.Set("RateLimit", `"hourly";r=`+strconv.FormatInt(remaining, 10)+";t=1800")
		h.Set("X-RateLimit-Limit", strconv.FormatInt(f.limit, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("X-RateLimit-Used", strconv.FormatInt(used, 10))
		h.Set("X-RateLimit-Reset", strconv.Itoa(resetAt))
		if d["allowed"] == false {
			h.Set("Retry-After", strconv.FormatInt((f.retryAfterMS+999)/1000, 10))
		}
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(d)
}

func writeTestProblem(w http.ResponseWriter, status int, code, detail string, fields map[string]string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status),
		"status": status, "detail": detail, "code": code, "errors": fields})
}

// fakeAdmin stands in for the few admin API routes the examples use.
func fakeAdmin() http.Handler {
	const token = "session-token"
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/login", func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Email, Password string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		if in.Email != "ops@example.com" || in.Password != "correct horse" {
			writeTestProblem(w, http.StatusUnauthorized, "unauthorized", "wrong email or password", nil)
			return
		}
		writeTestJSON(w, http.StatusOK, map[string]any{"token": token, "token_type": "Bearer",
			"expires_at": "2026-10-01T12:00:00Z", "user": map[string]any{"id": "u-1", "email": in.Email, "role": "operator",
				"created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"}})
	})
	signedIn := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				writeTestProblem(w, http.StatusUnauthorized, "unauthorized", "sign in first", nil)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /api/v1/tenants", signedIn(func(w http.ResponseWriter, r *http.Request) {
		items := []any{}
		if strings.Contains("acme", r.URL.Query().Get("q")) {
			items = append(items, map[string]any{"id": "0b0e7c1e-0000-4000-8000-000000000001", "name": "acme",
				"plan_id": 3, "status": "active", "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"})
		}
		writeTestJSON(w, http.StatusOK, map[string]any{"items": items, "next_cursor": nil})
	}))
	mux.HandleFunc("POST /api/v1/tenants/{tenant}/keys", signedIn(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Name string `json:"name"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Name) > 200 {
			writeTestProblem(w, http.StatusUnprocessableEntity, "invalid", "the request has invalid fields", map[string]string{"name": "must be at most 200 characters"})
			return
		}
		writeTestJSON(w, http.StatusCreated, map[string]any{"secret": "tg_4fT9aQ2x0000000000000000000000000000",
			"key": map[string]any{"id": "k-1", "tenant_id": r.PathValue("tenant"), "name": in.Name, "prefix": "tg_4fT9aQ2x",
				"metadata": map[string]string{}, "created_at": "2026-10-01T12:00:00Z"}})
	}))
	return mux
}

func writeTestJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
