package main

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestTextPostgresCannotStore: a NUL character or invalid UTF-8 anywhere
// a request carries text — a JSON field, a map key, a query parameter,
// the path, a console form, the sign-in form — is refused before it
// reaches Postgres, with a 4xx naming where it was, never a 500. A time
// that is not RFC 3339 is refused naming its field.
func TestTextPostgresCannotStore(t *testing.T) {
	srv, op, acme, _ := acmeSetup(t)
	api := srv.URL + "/api/v1"
	keys := api + "/tenants/" + acme.ID + "/keys"

	var issued struct {
		Key struct {
			ID string `json:"id"`
		} `json:"key"`
	}
	res := call(t, "POST", keys, op, map[string]any{"name": "ok"})
	want(t, res, http.StatusCreated)
	res.Decode(t, &issued)

	for _, tc := range []struct {
		what, method, url, token string
		body                     any
		status                   int
		field                    string
	}{
		{"a NUL in the sign-in email", "POST", api + "/login", "", map[string]any{"email": "a\x00@example.com", "password": "x"},
			http.StatusUnprocessableEntity, "email"},
		{"a NUL in a key's name", "POST", keys, op, map[string]any{"name": "a\x00b"}, http.StatusUnprocessableEntity, "name"},
		{"a NUL in a metadata key", "POST", keys, op, map[string]any{"name": "k", "metadata": map[string]string{"te\x00am": "x"}},
			http.StatusUnprocessableEntity, `metadata."te\x00am"`},
		{"a NUL in a metadata value", "POST", keys, op, map[string]any{"name": "k", "metadata": map[string]string{"team": "x\x00"}},
			http.StatusUnprocessableEntity, "metadata.team"},
		{"a NUL in a tenant's name", "POST", api + "/tenants", op, map[string]any{"name": "\x00", "plan_id": 1},
			http.StatusUnprocessableEntity, "name"},
		{"a time that is not RFC 3339", "POST", keys, op, map[string]any{"name": "k", "expires_at": "tomorrow"},
			http.StatusBadRequest, "expires_at"},
		{"a nullable time that is not RFC 3339", "PATCH", keys + "/" + issued.Key.ID, op, map[string]any{"expires_at": "soon"},
			http.StatusBadRequest, "expires_at"},
		{"a NUL in a query parameter", "GET", api + "/tenants?q=%00", op, nil, http.StatusUnprocessableEntity, "q"},
		{"invalid UTF-8 in a query parameter", "GET", api + "/tenants?q=%FF", op, nil, http.StatusUnprocessableEntity, "q"},
		{"a NUL in the path", "GET", api + "/tenants/%00", op, nil, http.StatusUnprocessableEntity, "path"},
	} {
		res := call(t, tc.method, tc.url, tc.token, tc.body)
		if res.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.what, res.StatusCode, res.Body, tc.status)
			continue
		}
		if p := problemOf(t, res); p.Errors[tc.field] == "" {
			t.Errorf("%s: problem %+v does not name %s", tc.what, p, tc.field)
		}
	}

	// The console: its sign-in form (no session) and a signed-in form.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	csrfOf := func(res response) string {
		t.Helper()
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(res.Body)
		if m == nil {
			t.Fatalf("no CSRF token on %s", res.Request.URL.Path)
		}
		return string(m[1])
	}
	post := func(path string, cookies []*http.Cookie, form url.Values) response {
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		return sendWith(t, client, req)
	}
	req, err := http.NewRequest("GET", srv.URL+"/login", nil)
	testenv.Must(t, err)
	visitor := sendWith(t, client, req)
	res = post("/login", visitor.Cookies(), url.Values{"csrf": {csrfOf(visitor)}, "email": {"a\x00@example.com"}, "password": {"whatever12345"}})
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(res.Body), "email") {
		t.Errorf("console sign-in with a NUL in the email: %d, want 422 naming email\n%s", res.StatusCode, res.Body)
	}

	session := []*http.Cookie{{Name: adminapi.SessionCookie, Value: op}}
	req, err = http.NewRequest("GET", srv.URL+"/tenants/"+acme.ID+"/keys", nil)
	testenv.Must(t, err)
	req.AddCookie(session[0])
	page := sendWith(t, client, req)
	want(t, page, http.StatusOK)
	res = post("/tenants/"+acme.ID+"/keys", session, url.Values{"csrf": {csrfOf(page)}, "name": {"\xff"}})
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(string(res.Body), "name") {
		t.Errorf("console key with an invalid UTF-8 name: %d, want 422 naming name\n%s", res.StatusCode, res.Body)
	}
}
