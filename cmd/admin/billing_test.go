package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/stripetest"
)

// providerWebhookRoute is the payment provider's webhook, as the router
// lists it.
const providerWebhookRoute = "/api/v1/billing/stripe/webhook"

// billedAcme is acmeSetupWith (settings) with the free plan at 1500 a
// month (in its price history too) since 2020, and acme linked to the
// Stripe customer cus_acme: every closed month bills acme 1500. It
// returns the server and the operator's token.
func billedAcme(t *testing.T, settings map[string]string) (*adminServer, string) {
	t.Helper()
	srv, op, _, _ := acmeSetupWith(t, settings)
	ctx := context.Background()
	_, err := srv.DB.Exec(ctx, `UPDATE plans SET base_fee_minor = 1500 WHERE name = 'free'`)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `UPDATE plan_prices SET base_fee_minor = 1500 WHERE plan_id = (SELECT id FROM plans WHERE name = 'free')`)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2020-01-01T00:00:00Z'`)
	testenv.Must(t, err)
	_, err = runAdmin(t, srv.DBURL, "", "billing", "link", "--tenant", "acme", "--customer", "cus_acme")
	testenv.Must(t, err)
	return srv, op
}

// acmeSetupWith is acmeSetup on a server with more settings.
func acmeSetupWith(t *testing.T, settings map[string]string) (srv *adminServer, op string, acme tenants.Tenant, admin string) {
	t.Helper()
	srv, op = operatorSetup(t, settings)
	ctx := context.Background()
	free, err := plans.NewStore(srv.DB).Create(ctx, plans.Plan{Name: "free"})
	testenv.Must(t, err)
	acme, err = tenants.NewStore(srv.DB).Create(ctx, "acme", free.ID)
	testenv.Must(t, err)
	admin = sessionFor(t, srv.DB, createUser(t, srv.DB, "admin@acme.example", auth.RoleTenantAdmin, acme.ID))
	return srv, op, acme, admin
}

// billingAPICases are the API's billing changes on acme, at tenantPath:
// admin is acme's tenant_admin, who tops up at the price the plan case
// sets on acme's plan.
func billingAPICases(t *testing.T, srv *adminServer, tenantPath, op, admin string, acme tenants.Tenant) []routeCase {
	fixed := func(s string) func() string { return func() string { return s } }
	planID := acmePlanOf(t, srv, acme)
	planPath := func() string {
		return strings.TrimSuffix(tenantPath, "/tenants/"+acme.ID) + "/plans/" + planID() + "/billing"
	}
	return []routeCase{
		{route: "PUT /api/v1/tenants/{tenantID}/billing/account", as: op, path: fixed(tenantPath + "/billing/account"),
			body: map[string]any{"customer_id": "cus_acme1"}, status: 200, action: "billing_account.link",
			target: func(response) string { return acme.ID }, invalid: map[string]any{"customer_id": "acct_1"}},
		{route: "POST /api/v1/tenants/{tenantID}/billing/top-ups", as: op, path: fixed(tenantPath + "/billing/top-ups"),
			body: map[string]any{"units": 1000, "amount_minor": 900, "success_url": "https://console.example/ok",
				"cancel_url": "https://console.example/back"},
			status: 201, action: "credits.topup", target: func(res response) string { return jsonFieldOf(res.Body, "id") },
			invalid: map[string]any{"units": 0, "amount_minor": 900, "success_url": "x", "cancel_url": "y"}},
		{route: "PUT /api/v1/plans/{planID}/billing", as: op, path: planPath,
			body: map[string]any{"dunning_grace_s": 86400, "top_up_unit_minor": 3}, status: 200, action: "plan.billing",
			target: func(response) string { return planID() }, invalid: map[string]any{"dunning_grace_s": -1}},
		// A tenant admin pays the plan's price: another is refused.
		{route: "POST /api/v1/tenants/{tenantID}/billing/top-ups", as: admin, path: fixed(tenantPath + "/billing/top-ups"),
			body:   map[string]any{"units": 40, "success_url": "https://console.example/ok", "cancel_url": "https://console.example/back"},
			status: 201, action: "credits.topup", target: func(res response) string { return jsonFieldOf(res.Body, "id") },
			invalid: map[string]any{"units": 40, "amount_minor": 1, "success_url": "https://console.example/ok",
				"cancel_url": "https://console.example/back"}},
	}
}

// billingConsoleCases are the console's billing forms on acme; admin is
// acme's tenant_admin.
func billingConsoleCases(t *testing.T, srv *adminServer, tenantPath, op, admin string, acme tenants.Tenant) []routeCase {
	fixed := func(s string) func() string { return func() string { return s } }
	topUpOf := func(units int) func(response) string {
		return func(response) string {
			var id string
			testenv.Must(t, srv.DB.QueryRow(context.Background(), `SELECT id::text FROM credit_topups WHERE units = $1`, units).Scan(&id))
			return id
		}
	}
	planID := acmePlanOf(t, srv, acme)
	return []routeCase{
		{route: "POST /tenants/{tenantID}/billing/account", as: op, path: fixed(tenantPath + "/billing/account"),
			body: url.Values{"customer_id": {"cus_acme2"}}, status: 303, action: "billing_account.link",
			target: func(response) string { return acme.ID }, invalid: url.Values{"customer_id": {"acme"}}},
		{route: "POST /tenants/{tenantID}/billing/top-ups", as: op, path: fixed(tenantPath + "/billing/top-ups"),
			body: url.Values{"units": {"77"}, "amount_minor": {"300"}}, status: 303, action: "credits.topup",
			target: topUpOf(77), invalid: url.Values{"units": {"-1"}, "amount_minor": {"300"}}},
		{route: "POST /plans/{planID}/billing", as: op, path: func() string { return "/plans/" + planID() + "/billing" },
			body: url.Values{"dunning_grace": {"48h"}, "top_up_unit_minor": {"4"}}, status: 303, action: "plan.billing",
			target: func(response) string { return planID() }, invalid: url.Values{"dunning_grace": {"soon"}}},
		{route: "POST /tenants/{tenantID}/billing/top-ups", as: admin, path: fixed(tenantPath + "/billing/top-ups"),
			body: url.Values{"units": {"88"}}, status: 303, action: "credits.topup",
			target: topUpOf(88), invalid: url.Values{"units": {"88"}, "amount_minor": {"1"}}},
	}
}

// acmePlanOf returns the ID of acme's plan when called: earlier cases
// move acme to another plan.
func acmePlanOf(t *testing.T, srv *adminServer, acme tenants.Tenant) func() string {
	return func() string {
		got, err := tenants.NewStore(srv.DB).Get(context.Background(), acme.ID)
		testenv.Must(t, err)
		return strconv.FormatInt(got.PlanID, 10)
	}
}

// jsonFieldOf is jsonField without a test: "" when absent.
func jsonFieldOf(body []byte, name string) string {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return ""
	}
	s, _ := m[name].(string)
	return s
}

// TestInvoicesThroughTheAdminServer: the admin server with Stripe
// settings closes a month into an invoice at the local Stripe, takes
// Stripe's webhooks (400 for a bad or stale signature, 200 for an
// unknown invoice, nothing changed by either; a signed invoice.paid marks
// the statement paid, once), shows the statement's invoice and the
// reconciliation, and the CLI reconciles the month.
func TestInvoicesThroughTheAdminServer(t *testing.T) {
	local := stripetest.Start(t)
	settings := local.Settings()
	settings["TOLLGATE_INVOICE_MODE"] = "send"
	settings["TOLLGATE_LOG_LEVEL"] = "info"
	srv, op, acme, _ := acmeSetupWith(t, settings)
	ctx := context.Background()
	if !strings.Contains(srv.Logs.String(), "invoicing on") || strings.Contains(srv.Logs.String(), stripetest.SecretKey) ||
		strings.Contains(srv.Logs.String(), stripetest.WebhookSecret) {
		t.Errorf("start log: %s", srv.Logs.String())
	}
	api := srv.URL + "/api/v1"
	// The free plan costs 1500 a month, in its price history too.
	_, err := srv.DB.Exec(ctx, `UPDATE plans SET base_fee_minor = 1500 WHERE name = 'free'`)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `UPDATE plan_prices SET base_fee_minor = 1500 WHERE plan_id = (SELECT id FROM plans WHERE name = 'free')`)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2020-01-01T00:00:00Z'`)
	testenv.Must(t, err)
	want(t, call(t, "PUT", api+"/tenants/"+acme.ID+"/billing/account", op, map[string]any{"create": true}), 200)
	want(t, call(t, "POST", api+"/months/2020-05/close", op, nil), 200)
	made := local.Invoices()
	if len(made) != 1 || made[0].Total != 1500 || made[0].Status != "open" {
		t.Fatalf("invoices at Stripe: %+v", made)
	}
	sent := false
	for _, q := range local.Requests() {
		if q.Path == "/v1/invoices/"+made[0].ID+"/send" && q.IdempotencyKey == made[0].Metadata["tollgate_ref"]+"/send" {
			sent = true
		}
	}
	if !sent {
		t.Error("the invoice was not sent (TOLLGATE_INVOICE_MODE=send)")
	}

	hook := func(payload []byte, sig string) response {
		req, err := http.NewRequest("POST", api+"/billing/stripe/webhook", bytes.NewReader(payload))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/json")
		if sig != "" {
			req.Header.Set("Stripe-Signature", sig)
		}
		return send(t, req)
	}
	audits := func() int64 { return lastAuditID(t, srv) }
	paid := stripetest.InvoiceEvent("evt_http_paid", "invoice.paid", made[0], time.Now())
	before := audits()
	want(t, hook(paid, stripetest.Sign(paid, "whsec_other0123456789abc", time.Now())), 400)
	want(t, hook(paid, stripetest.Sign(paid, stripetest.WebhookSecret, time.Now().Add(-time.Hour))), 400)
	want(t, hook(paid, ""), 400)
	stranger := made[0]
	stranger.ID, stranger.Metadata = "in_elsewhere", nil
	strange := stripetest.InvoiceEvent("evt_http_unknown", "invoice.paid", stranger, time.Now())
	want(t, hook(strange, stripetest.Sign(strange, stripetest.WebhookSecret, time.Now())), 200)
	if audits() != before {
		t.Error("refused or unknown events wrote audit entries")
	}
	for range 2 {
		want(t, hook(paid, stripetest.Sign(paid, stripetest.WebhookSecret, time.Now())), 200)
	}
	got := auditSince(t, srv, before)
	if len(got) != 1 || got[0].Action != "invoice.paid" || got[0].Actor != "stripe" {
		t.Errorf("invoice.paid twice wrote %+v, want one invoice.paid by stripe", got)
	}
	var st billing.Statement
	call(t, "GET", api+"/statements/"+acme.ID+"/2020-05", op, nil).Decode(t, &st)
	if st.Invoice == nil || st.Invoice.PaymentStatus != "paid" || st.Invoice.ProviderInvoiceID != made[0].ID {
		t.Errorf("statement's invoice %+v", st.Invoice)
	}
	res := call(t, "GET", api+"/months/2020-05/reconciliation", op, nil)
	want(t, res, 200)
	if !strings.Contains(string(res.Body), `"differences":0`) {
		t.Errorf("reconciliation %s", res.Body)
	}
	page := func(path, wantText string) {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		testenv.Must(t, err)
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: op})
		res := send(t, req)
		if res.StatusCode != 200 || !strings.Contains(string(res.Body), wantText) {
			t.Errorf("GET %s = %d, want 200 with %q:\n%s", path, res.StatusCode, wantText, res.Body)
		}
	}
	page("/months/2020-05/reconciliation", "No differences.")
	page("/tenants/"+acme.ID+"/billing", made[0].ID)
	page("/tenants/"+acme.ID+"/statements/2020-05", `id="statement-invoice"`)
	out, err := runAdmin(t, srv.DBURL, "", "reconcile", "--month", "2020-05")
	testenv.Must(t, err)
	if !strings.Contains(out, "acme") || !strings.Contains(out, "1 statements, 0 with differences") {
		t.Errorf("admin reconcile: %s", out)
	}
}

// TestCloseFromAShellWithoutTheStripeKey: `admin close` run where
// TOLLGATE_STRIPE_SECRET_KEY is not set records the invoice of the linked
// tenant, pending, and says so; the admin server, which has the key,
// pushes it.
func TestCloseFromAShellWithoutTheStripeKey(t *testing.T) {
	local := stripetest.Start(t)
	settings := withSettings(local.Settings(), map[string]string{"TOLLGATE_INVOICE_PUSH_INTERVAL": "100ms"})
	srv, _ := billedAcme(t, settings)

	out, err := runAdmin(t, srv.DBURL, "", "close", "--month", "2020-05")
	if err != nil || !strings.Contains(out, "invoices issued: 1, pending") {
		t.Errorf("admin close without the key: %v\n%s", err, out)
	}
	testenv.Eventually(t, time.Now(), 10*time.Second, "the server pushing the invoice", func() (bool, string) {
		made := local.Invoices()
		return len(made) == 1 && made[0].Customer == "cus_acme" && made[0].Total == 1500, fmt.Sprintf("%+v", made)
	})
	out, err = runAdmin(t, srv.DBURL, "", "reconcile", "--month", "2020-05")
	if err != nil || !strings.Contains(out, "1 statements, 0 with differences") {
		t.Errorf("admin reconcile: %v\n%s", err, out)
	}
}

// TestInvoicingSettings: a malformed Stripe setting stops serve at start,
// naming the setting and not its value; without any, invoicing is off
// and says so once.
func TestInvoicingSettings(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"TOLLGATE_STRIPE_SECRET_KEY":     {"TOLLGATE_STRIPE_SECRET_KEY": "pk_test_notasecretkey1234", "TOLLGATE_STRIPE_WEBHOOK_SECRET": stripetest.WebhookSecret},
		"TOLLGATE_STRIPE_WEBHOOK_SECRET": {"TOLLGATE_STRIPE_SECRET_KEY": stripetest.SecretKey},
		"TOLLGATE_INVOICE_MODE":          {"TOLLGATE_INVOICE_MODE": "email"},
	} {
		_, err := loadInvoicingConfig(func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "notasecretkey") {
			t.Errorf("%v: err %v, want it to name %s", env, err, name)
		}
	}
	c, err := loadInvoicingConfig(func(string) string { return "" })
	if err != nil || c.On {
		t.Errorf("no settings: %+v, %v; want invoicing off", c, err)
	}
	srv := startAdmin(t, testenv.DatabaseURL(t), map[string]string{"TOLLGATE_LOG_LEVEL": "info"})
	if n := strings.Count(srv.Logs.String(), "invoicing off"); n != 1 {
		t.Errorf("invoicing off said %d times:\n%s", n, srv.Logs.String())
	}
}

// withSettings returns base with more's settings too.
func withSettings(base map[string]string, more map[string]string) map[string]string {
	for k, v := range more {
		base[k] = v
	}
	return base
}

// billingScenario calls the billing routes for TestOpenAPI: acme linked
// to a customer, a top-up, its billing, a month's reconciliation, and
// Stripe's webhook refused and acknowledged.
func billingScenario(t *testing.T, client *http.Client, base string, do func(method, path, token string, body any, status int) response,
	op, viewer, tenantID, month string) {
	t.Helper()
	tenant := "/api/v1/tenants/" + tenantID
	do("PUT", tenant+"/billing/account", op, map[string]any{"customer_id": "cus_openapi"}, 200)
	do("PUT", tenant+"/billing/account", op, map[string]any{"customer_id": "nope"}, 422)
	do("PUT", tenant+"/billing/account", viewer, map[string]any{"create": true}, 403)
	do("POST", tenant+"/billing/top-ups", op, map[string]any{"units": 100, "amount_minor": 250,
		"success_url": "https://console.example/ok", "cancel_url": "https://console.example/back"}, 201)
	do("POST", tenant+"/billing/top-ups", op, map[string]any{"units": 0}, 422)
	var tn struct {
		PlanID int64 `json:"plan_id"`
	}
	do("GET", tenant, op, nil, 200).Decode(t, &tn)
	planBilling := "/api/v1/plans/" + strconv.FormatInt(tn.PlanID, 10) + "/billing"
	do("GET", planBilling, op, nil, 200)
	do("PUT", planBilling, op, map[string]any{"dunning_grace_s": 3600, "top_up_unit_minor": 2}, 200)
	do("PUT", planBilling, op, map[string]any{"dunning_grace_s": nil}, 200)
	do("PUT", planBilling, op, map[string]any{"top_up_unit_minor": 0}, 422)
	do("PUT", planBilling, viewer, map[string]any{}, 403)
	do("PUT", "/api/v1/plans/999999/billing", op, map[string]any{}, 404)
	do("POST", tenant+"/billing/top-ups", viewer, map[string]any{"units": 5, "success_url": "https://console.example/ok",
		"cancel_url": "https://console.example/back"}, 403)
	do("GET", tenant+"/billing", op, nil, 200)
	do("GET", tenant+"/billing", viewer, nil, 200)
	do("GET", "/api/v1/months/"+month+"/reconciliation", op, nil, 200)
	do("GET", "/api/v1/months/someday/reconciliation", op, nil, 422)
	do("GET", "/api/v1/months/"+month+"/reconciliation", viewer, nil, 403)
	hook := func(payload []byte, sig string, status int) {
		req, _ := http.NewRequest("POST", base+providerWebhookRoute, bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sig)
		if res := sendWith(t, client, req); res.StatusCode != status {
			t.Fatalf("webhook = %d %s, want %d", res.StatusCode, res.Body, status)
		}
	}
	ev := stripetest.CheckoutEvent("evt_openapi", "cs_nobody", "00000000-0000-0000-0000-000000000000", "paid", time.Now())
	hook(ev, "t=1,v1=00", 400)
	hook(ev, stripetest.Sign(ev, stripetest.WebhookSecret, time.Now()), 200)
}

// TestTenantAdminTopsUp: a tenant's own admin buys prepaid credits
// through the local Stripe, from the API and from the console's Billing
// page, at its plan's price and no other; Stripe's paid event grants
// them once; a viewer is refused (403) and another tenant's top-up is not
// found (404); without a plan price only operators may open one.
func TestTenantAdminTopsUp(t *testing.T) {
	local := stripetest.Start(t)
	srv, op, acme, admin := acmeSetupWith(t, local.Settings())
	ctx := context.Background()
	api := srv.URL + "/api/v1"
	viewer := sessionFor(t, srv.DB, createUser(t, srv.DB, "viewer@acme.example", auth.RoleTenantViewer, acme.ID))
	globex, err := tenants.NewStore(srv.DB).Create(ctx, "globex", acme.PlanID)
	testenv.Must(t, err)
	want(t, call(t, "PUT", api+"/tenants/"+acme.ID+"/billing/account", op, map[string]any{"create": true}), 200)
	want(t, call(t, "PUT", api+"/tenants/"+globex.ID+"/billing/account", op, map[string]any{"create": true}), 200)
	topUps := func(tenantID string) string { return api + "/tenants/" + tenantID + "/billing/top-ups" }
	body := func(units int, amount ...int) map[string]any {
		b := map[string]any{"units": units, "success_url": "https://console.example/ok", "cancel_url": "https://console.example/back"}
		if len(amount) > 0 {
			b["amount_minor"] = amount[0]
		}
		return b
	}

	// No price on the plan: the tenant's admin may not buy; an operator may.
	want(t, call(t, "POST", topUps(acme.ID), admin, body(10)), 409)
	want(t, call(t, "PUT", api+"/plans/"+strconv.FormatInt(acme.PlanID, 10)+"/billing", op,
		map[string]any{"top_up_unit_minor": 25}), 200)

	before := lastAuditID(t, srv)
	want(t, call(t, "POST", topUps(acme.ID), viewer, body(10)), 403)
	want(t, call(t, "POST", topUps(globex.ID), admin, body(10)), 404)
	want(t, call(t, "POST", topUps(acme.ID), admin, body(10, 1)), 422)
	if got := auditSince(t, srv, before); len(got) != 0 {
		t.Errorf("refused top-ups wrote %+v", got)
	}
	res := call(t, "POST", topUps(acme.ID), admin, body(40))
	want(t, res, 201)
	var u billing.TopUp
	res.Decode(t, &u)
	if u.AmountMinor != 1000 || u.Units != 40 || u.CheckoutURL == "" || u.SessionID == "" {
		t.Fatalf("top-up %+v, want 40 units for 1000 with a checkout", u)
	}
	if got := auditSince(t, srv, before); len(got) != 1 || got[0].Action != "credits.topup" || got[0].Actor != "admin@acme.example" {
		t.Errorf("top-up audited as %+v, want one credits.topup by the tenant admin", got)
	}
	charged := false
	for _, q := range local.Requests() {
		if q.Method == "POST" && q.Path == "/v1/checkout/sessions" && q.Form.Get("line_items[0][price_data][unit_amount]") == "1000" {
			charged = true
		}
	}
	if !charged {
		t.Error("no checkout session for 1000 reached Stripe")
	}

	// Stripe says it was paid, twice: granted once.
	balance := func() int64 {
		var b struct {
			Balance int64 `json:"balance"`
		}
		call(t, "GET", api+"/tenants/"+acme.ID+"/credits", admin, nil).Decode(t, &b)
		return b.Balance
	}
	paid := stripetest.CheckoutEvent("evt_self_serve", u.SessionID, u.ID, "paid", time.Now())
	for range 2 {
		req, err := http.NewRequest("POST", api+"/billing/stripe/webhook", bytes.NewReader(paid))
		testenv.Must(t, err)
		req.Header.Set("Stripe-Signature", stripetest.Sign(paid, stripetest.WebhookSecret, time.Now()))
		want(t, send(t, req), 200)
	}
	if b := balance(); b != 40 {
		t.Errorf("balance %d after the paid top-up, want 40", b)
	}

	// The console: the admin's Billing page offers the form at the plan's
	// price, without a price field; posting it goes on to Checkout.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := func(token, path string) response {
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		testenv.Must(t, err)
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
		return sendWith(t, client, req)
	}
	billingPage := "/tenants/" + acme.ID + "/billing"
	got := page(admin, billingPage)
	if got.StatusCode != 200 || !strings.Contains(string(got.Body), `id="billing-top-up"`) ||
		!strings.Contains(string(got.Body), `id="top-up-price"`) || strings.Contains(string(got.Body), `name="amount_minor"`) {
		t.Fatalf("the admin's billing page = %d, want the top-up form at the plan's price:\n%s", got.StatusCode, got.Body)
	}
	if v := page(viewer, billingPage); v.StatusCode != 200 || strings.Contains(string(v.Body), `id="billing-top-up"`) {
		t.Errorf("the viewer's billing page = %d, offering a top-up", v.StatusCode)
	}
	csrfOf := func(token string) string {
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page(token, billingPage).Body)
		if m == nil {
			t.Fatal("no CSRF token on the billing page")
		}
		return string(m[1])
	}
	post := func(token, path string, form url.Values) response {
		form.Set("csrf", csrfOf(token))
		req, err := http.NewRequest("POST", srv.URL+path, strings.NewReader(form.Encode()))
		testenv.Must(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
		return sendWith(t, client, req)
	}
	if r := post(viewer, billingPage+"/top-ups", url.Values{"units": {"3"}}); r.StatusCode != 403 {
		t.Errorf("a viewer's top-up form = %d, want 403", r.StatusCode)
	}
	if r := post(admin, "/tenants/"+globex.ID+"/billing/top-ups", url.Values{"units": {"3"}}); r.StatusCode != 404 {
		t.Errorf("another tenant's top-up form = %d, want 404", r.StatusCode)
	}
	r := post(admin, billingPage+"/top-ups", url.Values{"units": {"12"}})
	if r.StatusCode != 303 || !strings.HasPrefix(r.Header.Get("Location"), "http") {
		t.Fatalf("the admin's top-up form = %d → %q, want 303 to Checkout", r.StatusCode, r.Header.Get("Location"))
	}
	var amount int64
	testenv.Must(t, srv.DB.QueryRow(ctx, `SELECT amount_minor FROM credit_topups WHERE tenant_id = $1 AND units = 12`, acme.ID).Scan(&amount))
	if amount != 300 {
		t.Errorf("the console's top-up costs %d, want 12 × 25 = 300", amount)
	}
}

// TestRetargetAllFailedFromTheCLI: `admin invoices retarget --all-failed`
// re-targets every failed invoice of the month, each audited, and prints
// what it did; it takes no --tenant.
func TestRetargetAllFailedFromTheCLI(t *testing.T) {
	srv, _, acme, _ := acmeSetupWith(t, nil)
	_, err := runAdmin(t, srv.DBURL, "", "billing", "link", "--tenant", "acme", "--customer", "cus_acme")
	testenv.Must(t, err)
	closedBefore(t, srv, acme, "2019-12")
	_, err = runAdmin(t, srv.DBURL, "", "invoices", "issue", "--month", "2019-12")
	testenv.Must(t, err)
	refusedForGood(t, srv, acme, "2019-12")

	if _, err := runAdmin(t, srv.DBURL, "", "invoices", "retarget", "--all-failed", "--tenant", "acme"); err == nil {
		t.Error("retarget --all-failed --tenant acme succeeded, want it refused")
	}
	last := lastAuditID(t, srv)
	out, err := runAdmin(t, srv.DBURL, "", "invoices", "retarget", "--all-failed", "--month", "2019-12")
	testenv.Must(t, err)
	var res billing.RetargetResult
	testenv.Must(t, json.Unmarshal([]byte(out), &res))
	ref := billing.InvoiceRef(acme.ID, "2019-12")
	if len(res.Retargeted) != 1 || res.Retargeted[0].Ref != ref || res.Retargeted[0].PushState != billing.PushPending {
		t.Errorf("retarget --all-failed printed %s, want acme's invoice pending", out)
	}
	wantEntry(t, "admin invoices retarget --all-failed", auditSince(t, srv, last), "cli", "invoice.retarget", ref)
	out, err = runAdmin(t, srv.DBURL, "", "invoices", "retarget", "--all-failed")
	if err != nil || !strings.Contains(out, `"retargeted": []`) {
		t.Errorf("retarget --all-failed with none failed: %v\n%s", err, out)
	}
}

// TestCloseFromAShellWithoutTheInvoiceMode: the admin server pushes in
// finalize mode; `admin close` run from a shell with the Stripe settings
// but not TOLLGATE_INVOICE_MODE pushes the month's invoice as a draft,
// and says it pushed in draft mode, the default. The server, in finalize
// mode, counts the draft as a difference (its reconciliation and
// /metrics); the shell's reconcile says it compares in draft mode, and
// one with the mode reports the draft. `invoices push` says its mode on
// stderr.
func TestCloseFromAShellWithoutTheInvoiceMode(t *testing.T) {
	local := stripetest.Start(t)
	settings := withSettings(local.Settings(), map[string]string{"TOLLGATE_INVOICE_MODE": "finalize", "TOLLGATE_INVOICE_PUSH_INTERVAL": "1h"})
	srv, op := billedAcme(t, settings)
	ctx := context.Background()

	// The shell: the Stripe settings, not the mode.
	shell := func(mode string, args ...string) (stdout, stderr string) {
		t.Helper()
		env := withSettings(local.Settings(), map[string]string{"TOLLGATE_DATABASE_URL": srv.DBURL, "TOLLGATE_SECRET_KEY": testenv.SecretKey})
		if mode != "" {
			env["TOLLGATE_INVOICE_MODE"] = mode
		}
		var out, errOut bytes.Buffer
		if err := run(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut, nil); err != nil {
			t.Fatalf("admin %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	out, _ := shell("", "close", "--month", "2020-05")
	if !strings.Contains(out, "pushed to Stripe: 1") || !strings.Contains(out, "invoices pushed in draft mode (TOLLGATE_INVOICE_MODE not set") {
		t.Errorf("admin close without the mode:\n%s\nwant it to say it pushed in draft mode, the default", out)
	}
	if made := local.Invoices(); len(made) != 1 || made[0].Status != "draft" {
		t.Fatalf("invoices at Stripe %+v, want one draft", made)
	}

	res := call(t, "GET", srv.URL+"/api/v1/months/2020-05/reconciliation", op, nil)
	want(t, res, 200)
	if !strings.Contains(string(res.Body), `"differences":1`) || !strings.Contains(string(res.Body), "still a draft at the provider") {
		t.Errorf("the server's reconciliation (finalize mode): %s\nwant the draft as a difference", res.Body)
	}
	metrics := call(t, "GET", srv.URL+"/metrics", "", nil)
	if !strings.Contains(string(metrics.Body), "\ntollgate_invoice_differences 1\n") {
		t.Errorf("/metrics does not count the draft as a difference:\n%s", metrics.Body)
	}
	out, _ = shell("", "reconcile", "--month", "2020-05")
	if !strings.Contains(out, "1 statements, 0 with differences") || !strings.Contains(out, "compared in draft mode") {
		t.Errorf("admin reconcile without the mode:\n%s\nwant no difference, and that it compared in draft mode", out)
	}
	out, _ = shell("finalize", "reconcile", "--month", "2020-05")
	if !strings.Contains(out, "1 statements, 1 with differences") || !strings.Contains(out, "still a draft") {
		t.Errorf("admin reconcile in finalize mode:\n%s\nwant the draft as a difference", out)
	}
	out, errOut := shell("send", "invoices", "push")
	if !strings.Contains(errOut, "invoices pushed in send mode (TOLLGATE_INVOICE_MODE)") || !strings.Contains(out, `"pushed": 0`) {
		t.Errorf("admin invoices push in send mode: stdout %s, stderr %s; want the report, and the mode on stderr", out, errOut)
	}
}
