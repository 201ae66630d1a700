package ui_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
)

// TestTopUpReturnsBehindATLSProxy: behind a proxy that ends TLS and says
// so (a trusted peer's X-Forwarded-Proto: https), the console's top-up
// sends the buyer to Checkout with https return URLs, where the __Host-
// session cookie is sent; reached over plain HTTP it keeps http.
func TestTopUpReturnsBehindATLSProxy(t *testing.T) {
	local := stripetest.Start(t)
	settings := local.Settings()
	settings["TOLLGATE_TRUSTED_PROXIES"] = "127.0.0.1/32,::1/128"
	srv := admintest.StartAdmin(t, testenv.DatabaseURL(t), settings)
	ctx := context.Background()
	pro, err := plans.NewStore(srv.DB).Create(ctx, plans.Plan{Name: "pro", BaseFeeMinor: 4900})
	testenv.Must(t, err)
	acme, err := tenants.NewStore(srv.DB).Create(ctx, "acme", pro.ID)
	testenv.Must(t, err)
	op := admintest.SessionFor(t, srv.DB, admintest.CreateUser(t, srv.DB, "ops@example.com", auth.RoleOperator, ""))
	admintest.Want(t, admintest.Call(t, "PUT", srv.URL+"/api/v1/tenants/"+acme.ID+"/billing/account", op,
		map[string]any{"customer_id": "cus_acme1"}), 200)

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	billingPage := "/tenants/" + acme.ID + "/billing"
	// send sends a request as the operator's browser, through a proxy
	// that ended TLS when overTLS.
	send := func(overTLS bool, method, path string, form url.Values) admintest.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		testenv.Must(t, err)
		cookie := adminapi.SessionCookie
		if overTLS {
			req.Header.Set("X-Forwarded-Proto", "https")
			cookie = adminapi.SecureSessionCookie
		}
		req.AddCookie(&http.Cookie{Name: cookie, Value: op})
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return admintest.SendWith(t, client, req)
	}
	for _, tc := range []struct {
		overTLS bool
		units   string
		want    string
	}{
		{true, "12", "https://"},
		{false, "13", "http://"},
	} {
		page := send(tc.overTLS, "GET", billingPage, nil)
		m := csrfInput.FindSubmatch(page.Body)
		if page.StatusCode != 200 || m == nil {
			t.Fatalf("billing page (TLS at the proxy %v) = %d, without a CSRF token", tc.overTLS, page.StatusCode)
		}
		r := send(tc.overTLS, "POST", billingPage+"/top-ups", url.Values{"csrf": {string(m[1])}, "units": {tc.units}, "amount_minor": {"300"}})
		if r.StatusCode != http.StatusSeeOther {
			t.Fatalf("top-up form (TLS at the proxy %v) = %d, want 303 to Checkout:\n%s", tc.overTLS, r.StatusCode, r.Body)
		}
		var success, cancel string
		for _, q := range local.Requests() {
			if q.Method == "POST" && q.Path == "/v1/checkout/sessions" &&
				q.Form.Get("line_items[0][price_data][product_data][name]") == tc.units+" prepaid units" {
				success, cancel = q.Form.Get("success_url"), q.Form.Get("cancel_url")
			}
		}
		back := strings.TrimPrefix(srv.URL, "http://") + billingPage
		if success != tc.want+back+"?top_up=paid" || cancel != tc.want+back {
			t.Errorf("TLS at the proxy %v: Checkout returns to %q and %q, want %s%s?top_up=paid and %s%s",
				tc.overTLS, success, cancel, tc.want, back, tc.want, back)
		}
	}
}
