package adminapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// newAdmin serves the admin routes on a fresh database with a login
// limit of 5 a minute and an operator, ops@example.com.
func newAdmin(t *testing.T) (url, password string) {
	t.Helper()
	url, password, _ = newAdminDB(t)
	return url, password
}

// newAdminDB is newAdmin, with its database.
func newAdminDB(t *testing.T) (url, password string, db *pgxpool.Pool) {
	t.Helper()
	db = testenv.DB(t)
	password = "a long operator password"
	_, err := auth.NewStore(db).CreateUser(context.Background(),
		auth.NewUser{Email: "ops@example.com", Password: password, Role: auth.RoleOperator})
	testenv.Must(t, err)
	srv := httptest.NewServer(adminapi.NewHandler(adminapi.Config{DB: db, Usage: usage.NewReader(db, usage.StoreConfig{}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionTTL: time.Hour, LoginPerMinute: 5,
		SessionSecret: []byte("test session secret 0123456789abcdef0123")}))
	t.Cleanup(srv.Close)
	return srv.URL, password, db
}

// post sends body as JSON with token (none when "") and returns the
// status and the decoded answer.
func post(t *testing.T, url, token, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	testenv.Must(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

// TestSignInRepeatedly: an account signs in successfully ten times within
// a minute from one address, twice the per-(address, email) limit of 5,
// and is never refused; five wrong passwords then are.
func TestSignInRepeatedly(t *testing.T) {
	url, password := newAdmin(t)
	right := `{"email": "ops@example.com", "password": "` + password + `"}`
	for i := range 10 {
		if status, out := post(t, url+"/api/v1/login", "", right); status != http.StatusOK {
			t.Fatalf("successful sign-in %d: %d %v, want 200", i+1, status, out)
		}
	}
	wrong := `{"email": "ops@example.com", "password": "a wrong guess"}`
	for i := range 5 {
		if status, _ := post(t, url+"/api/v1/login", "", wrong); status != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d, want 401", i+1, status)
		}
	}
	if status, _ := post(t, url+"/api/v1/login", "", right); status != http.StatusTooManyRequests {
		t.Errorf("after 5 wrong passwords: %d, want 429", status)
	}
}

// TestEndpointCreateAnswers: through the admin API, empty lists make an
// endpoint for every type and tenant (201), and a loopback address in any
// spelling the resolver accepts is a 422 naming the url field.
func TestEndpointCreateAnswers(t *testing.T) {
	url, password := newAdmin(t)
	_, login := post(t, url+"/api/v1/login", "", `{"email": "ops@example.com", "password": "`+password+`"}`)
	token, _ := login["token"].(string)
	endpoints := url + "/api/v1/webhooks/endpoints"
	if status, out := post(t, endpoints, token,
		`{"url": "https://hooks.example.com/all", "event_types": [], "tenant_ids": []}`); status != http.StatusCreated {
		t.Errorf("empty lists: %d %v, want 201", status, out)
	}
	for _, u := range []string{"http://127.1:9000/", "http://2130706433:9000/", "http://127.0.0.1.:9000/"} {
		status, out := post(t, endpoints, token, `{"url": "`+u+`"}`)
		fields, _ := out["errors"].(map[string]any)
		if status != http.StatusUnprocessableEntity || fields["url"] == nil {
			t.Errorf("%s: %d %v, want 422 naming url", u, status, out)
		}
	}
}
