package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

var pageFirst = page.First(page.MaxLimit)

// deliveryLimit bounds how long a delivery may take to show: the
// deliverer sends at once, but the machine may be loaded.
const deliveryLimit = 30 * time.Second

// fieldError returns the error shown beside the form field named input.
func (b *browser) fieldError(input string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(() => { const f = document.querySelector('[name=%q]').closest('.field');
		const e = f && f.querySelector('.field-error'); return e ? e.textContent : ""; })()`, input))
}

// submit clicks sel, which sends a form, and waits for waitFor on the
// page that answers: what matches waitFor now is removed first, so that
// the old page cannot satisfy the wait.
func (b *browser) submit(sel, waitFor string) {
	b.t.Helper()
	eval[bool](b, fmt.Sprintf(`document.querySelectorAll(%q).forEach(e => e.remove()), true`, waitFor))
	b.click(sel, waitFor)
}

// TestConsoleWebhooks: an operator adds an endpoint for one tenant's
// events and reads its secret once; sends a test event, which the
// receiver gets and the delivery log shows with its attempt; replays it
// (the same webhook-id again) and a time range; rotates the secret;
// disables and enables it; sees the notice of an endpoint Tollgate
// disabled for failing; and deletes it. A bad URL is named beside its
// field and stores nothing.
func TestConsoleWebhooks(t *testing.T) {
	admin := admintest.StartAdmin(t, testenv.DatabaseURL(t), nil)
	acme, _, _, _ := tenantSetup(t, admin)
	rc := testenv.NewReceiver(t, nil)
	es := events.NewStore(admin.DB)
	b := signedInAs(t, admin, "ops@example.com", auth.RoleOperator, "")
	ctx := context.Background()

	// A URL the guard refuses: the error beside the field, nothing stored.
	b.open("/webhooks")
	b.click("details.disclosure > summary", `input[name="url"]`)
	b.fill(map[string]string{`input[name="url"]`: "ftp://hooks.example.com/", `input[name="tenants"]`: "acme"})
	b.submit(`form[data-endpoint-form] button[type="submit"]`, ".field-error")
	if b.fieldError("url") == "" {
		t.Errorf("no error beside url: %s", b.pageText())
	}
	b.fill(map[string]string{`input[name="url"]`: rc.URL + "/hook", `input[name="tenants"]`: "acme, nobody"})
	b.submit(`form[data-endpoint-form] button[type="submit"]`, ".field-error")
	if !strings.Contains(b.fieldError("tenants"), "nobody") {
		t.Errorf("error beside tenants %q", b.fieldError("tenants"))
	}
	if got := eval[string](b, `document.querySelector('input[name="tenants"]').value`); got != "acme, nobody" {
		t.Errorf("the refused form lost its tenants: %q", got)
	}
	if pg, err := es.Endpoints(ctx, "", pageFirst); err != nil || len(pg.Items) != 0 {
		t.Fatalf("refused forms stored endpoints: %v %v", pg.Items, err)
	}

	// The endpoint: for acme's events of two types; its secret once.
	b.fill(map[string]string{`input[name="url"]`: rc.URL + "/hook", `input[name="description"]`: "billing alerts",
		`input[name="tenants"]`: "acme"})
	for _, typ := range []string{"quota.threshold.crossed", "spend_cap.reached"} {
		b.press(fmt.Sprintf(`input[name="event_types"][value=%q]`, typ))
	}
	b.submit(`form[data-endpoint-form] button[type="submit"]`, "#secret")
	secret := b.text("#secret")
	if !strings.HasPrefix(secret, "whsec_") || !strings.Contains(b.text(".notice"), "only time") {
		t.Fatalf("the secret page: %q\n%s", secret, b.pageText())
	}
	b.screenshot("webhook-secret")
	pg, err := es.Endpoints(ctx, "", pageFirst)
	testenv.Must(t, err)
	if len(pg.Items) != 1 {
		t.Fatalf("%d endpoints stored", len(pg.Items))
	}
	e := pg.Items[0]
	if e.TenantID != "" || fmt.Sprint(e.TenantIDs) != "["+acme.ID+"]" || fmt.Sprint(e.EventTypes) != "[quota.threshold.crossed spend_cap.reached]" ||
		e.Description != "billing alerts" {
		t.Fatalf("stored endpoint %+v", e)
	}
	b.open("/webhooks")
	if strings.Contains(b.html(), secret) {
		t.Fatal("the list shows the secret again")
	}
	row := fmt.Sprintf(`tr[data-endpoint=%q]`, e.ID)
	if got := b.text(row); !strings.Contains(got, "acme") || !strings.Contains(got, "spend_cap.reached") ||
		!strings.Contains(got, "enabled") || !strings.Contains(got, "no attempt yet") {
		t.Errorf("the endpoint's row: %q", got)
	}

	// A test event: delivered, and in the log with its attempt.
	b.click(row+" a", "h1.endpoint-url")
	endpointPage := b.location()
	if strings.Contains(b.html(), secret) {
		t.Fatal("the endpoint's page shows the secret")
	}
	b.submit(`button[value="test"]`, ".flash")
	testenv.WaitFor(t, deliveryLimit, "the test event at the receiver", func() bool { return len(rc.IDs()) == 1 })
	eventID := rc.IDs()[0]
	delivered := fmt.Sprintf(`tr[data-event=%q]`, eventID)
	testenv.WaitFor(t, deliveryLimit, "the delivery shown delivered", func() bool {
		b.open(endpointPage)
		return b.count(delivered) == 1 && strings.Contains(b.text(delivered), "delivered")
	})
	if got := b.text(delivered); !strings.Contains(got, "webhook.test") || !strings.Contains(got, "#1") || !strings.Contains(got, "200") {
		t.Errorf("the delivery's row: %q", got)
	}
	b.press(delivered + " details.attempt > summary")
	if got := b.text(delivered + " pre.response"); got != testenv.ReceiverReply {
		t.Errorf("the attempt's response %q, want %q", got, testenv.ReceiverReply)
	}
	b.screenshot("webhook-log")

	// Replay the event: a second delivery with the same webhook-id.
	b.submit(delivered+` form[action$="/replay"] button`, ".flash")
	if got := b.text(".flash"); got != "Replayed: 1 delivery queued." {
		t.Errorf("after replaying: %q", got)
	}
	testenv.WaitFor(t, deliveryLimit, "the replayed event at the receiver", func() bool { return len(rc.IDs()) == 2 })
	if ids := rc.IDs(); ids[1] != eventID {
		t.Errorf("the replay's webhook-id %s, want the event's %s", ids[1], eventID)
	}
	// A range the other way round: the error beside "to".
	b.fill(map[string]string{`input[name="from"]`: "2030-01-01T00:00", `input[name="to"]`: "2020-01-01T00:00"})
	b.submit(`form[data-replay-range] button[type="submit"]`, ".field-error")
	if b.fieldError("to") == "" {
		t.Errorf("no error beside to: %s", b.pageText())
	}
	// The last day: the test event, once.
	b.open(endpointPage)
	b.submit(`form[data-replay-range] button[type="submit"]`, ".flash")
	if got := b.text(".flash"); got != "Replayed: 1 delivery queued." {
		t.Errorf("after replaying the last day: %q", got)
	}

	// Rotate: a new secret, once.
	b.submit(`form[action$="/rotate"] button`, "#secret")
	if rotated := b.text("#secret"); rotated == secret || !strings.HasPrefix(rotated, "whsec_") ||
		!strings.Contains(b.text("dl.facts"), "keeps signing") {
		t.Errorf("after rotating: %q\n%s", rotated, b.pageText())
	}

	// Disable (confirmed), then enable.
	b.open(endpointPage)
	b.confirmDialogs(true)
	b.submit(`form[action$="/disable"] button`, ".flash")
	if e, err = es.Endpoint(ctx, "", e.ID); err != nil || e.DisabledAt == nil || e.DisabledReason != "manual" {
		t.Fatalf("after disabling: %+v %v", e, err)
	}
	if b.count(`button[value="test"]`) != 0 || !strings.Contains(b.text(".page-head"), "disabled") {
		t.Errorf("a disabled endpoint's page: %s", b.text(".page-head"))
	}
	b.submit(`form[action$="/enable"] button`, ".flash")
	if e, err = es.Endpoint(ctx, "", e.ID); err != nil || e.DisabledAt != nil {
		t.Fatalf("after enabling: %+v %v", e, err)
	}

	// An endpoint the deliverers disabled for failing: a notice on the
	// list and on its page.
	failing, err := events.NewOps(admin.DB, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(ctx, audit.CLI, acme.ID,
		events.EndpointInput{URL: "http://127.0.0.1:9/down"})
	testenv.Must(t, err)
	_, err = admin.DB.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '5 days',
		disabled_at = now(), disabled_reason = 'failing' WHERE id = $1`, failing.Endpoint.ID)
	testenv.Must(t, err)
	// And one failing for a day, still enabled: when it will be disabled.
	shaky, err := events.NewOps(admin.DB, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(ctx, audit.CLI, "",
		events.EndpointInput{URL: "http://127.0.0.1:9/shaky"})
	testenv.Must(t, err)
	_, err = admin.DB.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = now() - interval '1 day' WHERE id = $1`, shaky.Endpoint.ID)
	testenv.Must(t, err)
	b.open("/webhooks")
	if got := b.text(fmt.Sprintf(`.notice[data-failing=%q]`, shaky.Endpoint.ID)); !strings.Contains(got, "127.0.0.1:9/shaky") ||
		!strings.Contains(got, "disables it on") {
		t.Errorf("the failing endpoint's notice: %q", got)
	}
	notice := fmt.Sprintf(`.alert[data-failing=%q]`, failing.Endpoint.ID)
	if b.count(notice) != 1 || !strings.Contains(b.text(notice), "127.0.0.1:9/down") {
		t.Fatalf("no notice of the failing endpoint: %s", b.pageText())
	}
	if got := b.text(fmt.Sprintf(`tr[data-endpoint=%q]`, failing.Endpoint.ID)); !strings.Contains(got, "disabled: failing") ||
		!strings.Contains(got, "acme") {
		t.Errorf("the failing endpoint's row: %q", got)
	}
	b.screenshot("webhooks-failing")
	b.click(notice+" a", "h1.endpoint-url")

	// Delete (confirmed): gone, with its log.
	b.open(endpointPage)
	b.confirmDialogs(true)
	b.submit(`form[action$="/delete"] button`, ".flash")
	if b.location() != "/webhooks" || b.count(row) != 0 {
		t.Errorf("after deleting: at %s, %d rows", b.location(), b.count(row))
	}
	if _, err := es.Endpoint(ctx, "", e.ID); err == nil {
		t.Error("the deleted endpoint is still stored")
	}
}

// TestConsoleAlerts: a tenant admin sees its plan's thresholds and spend
// cap, adds a threshold of its own, lowers the cap but can neither raise
// it again nor set it above the plan's maximum, adds an endpoint of its
// own, and never sees another tenant's endpoints or alerts.
func TestConsoleAlerts(t *testing.T) {
	admin, metered := startWithMeteredPlan(t)
	ctx := context.Background()
	i64 := func(v int64) *int64 { return &v }
	qo, qs := quota.NewOps(admin.DB), quota.NewStore(admin.DB)
	_, err := qo.SetPlan(ctx, audit.CLI, metered.ID, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 80}},
		SpendCapDefaultMinor: i64(5000), SpendCapMaxMinor: i64(10000)})
	testenv.Must(t, err)
	ts := tenants.NewStore(admin.DB)
	acme, err := ts.Create(ctx, "acme", metered.ID)
	testenv.Must(t, err)
	globex, err := ts.Create(ctx, "globex", metered.ID)
	testenv.Must(t, err)
	ops := events.NewOps(admin.DB, nil, events.Guard{AllowPrivate: true})
	theirs, err := ops.CreateEndpoint(ctx, audit.CLI, globex.ID, events.EndpointInput{URL: "http://127.0.0.1:9/globex-secret-hook"})
	testenv.Must(t, err)
	// An event of each tenant.
	tx, err := admin.DB.Begin(ctx)
	testenv.Must(t, err)
	_, err = events.Emit(ctx, tx, events.Event{Type: events.TenantSuspended, TenantID: acme.ID, Data: map[string]string{"tenant_id": acme.ID}})
	testenv.Must(t, err)
	globexEvent, err := events.Emit(ctx, tx, events.Event{Type: events.TenantSuspended, TenantID: globex.ID, Data: map[string]string{"tenant_id": globex.ID}})
	testenv.Must(t, err)
	testenv.Must(t, tx.Commit(ctx))

	b := signedInAs(t, admin, "admin@acme.example", auth.RoleTenantAdmin, acme.ID)
	alerts := "/tenants/" + acme.ID + "/alerts"
	b.click(`nav.mainnav a[href="`+alerts+`"]`, "#thresholds")
	if got := b.text("#thresholds tbody"); !strings.Contains(got, "80 % of the included units") || !strings.Contains(got, "800") {
		t.Errorf("the plan's thresholds: %q", got)
	}
	if got := b.text("[data-cap]"); got != "$50.00" {
		t.Errorf("the cap in force shows %q, want the plan's default $50.00", got)
	}
	if got := b.text("#events tbody"); !strings.Contains(got, "tenant.suspended") {
		t.Errorf("its events: %q", got)
	}

	// A threshold of its own, beside the plan's; a bad number first.
	b.click("#thresholds details.disclosure > summary", `input[name="thresholds[1].value"]`)
	b.fill(map[string]string{`input[name="thresholds[1].value"]`: "lots"})
	b.submit(`form[data-thresholds-form] button[type="submit"]`, ".field-error")
	if got := b.fieldError("thresholds[1].value"); got != "must be a whole number" {
		t.Errorf("a threshold of %q: error %q", "lots", got)
	}
	b.fill(map[string]string{`input[name="thresholds[1].value"]`: "500", `select[name="thresholds[1].kind"]`: "units"})
	b.submit(`form[data-thresholds-form] button[type="submit"]`, ".flash")
	own, err := qs.TenantSettings(ctx, acme.ID)
	testenv.Must(t, err)
	if fmt.Sprint(own.Thresholds) != "[{80 0 0} {0 500 0}]" || own.SpendCapMinor != nil {
		t.Fatalf("after saving thresholds: %+v", own)
	}
	if got := b.text("#thresholds tbody"); !strings.Contains(got, "500 units") {
		t.Errorf("its own thresholds: %q", got)
	}

	// Lower the cap; raising it again, or above the plan's maximum, is
	// refused beside the field.
	b.fill(map[string]string{`input[name="spend_cap_minor"]`: "3000"})
	b.submit(`form[data-cap-form] button[type="submit"]`, ".flash")
	if got := b.text("[data-cap]"); got != "$30.00" {
		t.Errorf("the cap after lowering: %q", got)
	}
	for value, want := range map[string]string{"4000": "may only be lowered", "20000": "at most the plan's"} {
		b.fill(map[string]string{`input[name="spend_cap_minor"]`: value})
		b.submit(`form[data-cap-form] button[type="submit"]`, ".field-error")
		if got := b.fieldError("spend_cap_minor"); !strings.Contains(got, want) {
			t.Errorf("a cap of %s: error %q, want %q", value, got, want)
		}
	}
	if own, err = qs.TenantSettings(ctx, acme.ID); err != nil || own.SpendCapMinor == nil || *own.SpendCapMinor != 3000 ||
		len(own.Thresholds) != 2 {
		t.Fatalf("after refused caps: %+v %v", own, err)
	}

	// An endpoint of its own: its secret once, then on the page.
	b.open(alerts)
	b.click("#endpoints details.disclosure > summary", `input[name="url"]`)
	if b.count(`input[name="tenants"]`) != 0 {
		t.Error("a tenant's endpoint form offers other tenants")
	}
	b.fill(map[string]string{`input[name="url"]`: "http://127.0.0.1:9/acme-hook"})
	b.submit(`form[data-endpoint-form] button[type="submit"]`, "#secret")
	if !strings.HasPrefix(b.text("#secret"), "whsec_") {
		t.Fatalf("the secret page: %s", b.pageText())
	}
	b.open(alerts)
	if b.count("#endpoints tr[data-endpoint]") != 1 || !strings.Contains(b.text("#endpoints tbody"), "acme-hook") {
		t.Errorf("its endpoints: %s", b.text("#endpoints tbody"))
	}
	b.screenshot("alerts-set")

	// Nothing of globex: not on the page, not by ID, not by its path.
	if html := b.html(); strings.Contains(html, "globex") || strings.Contains(html, theirs.Endpoint.ID) || strings.Contains(html, globexEvent.ID) {
		t.Error("the alerts page shows something of globex")
	}
	token := b.csrf()
	own1 := "/tenants/" + acme.ID + "/webhooks/" + theirs.Endpoint.ID
	for _, c := range []struct{ method, path, body string }{
		{"GET", own1, ""},
		{"POST", own1 + "/test", "csrf=" + token},
		{"POST", own1 + "/delete", "csrf=" + token + "&confirmed=yes"},
		{"GET", "/tenants/" + globex.ID + "/alerts", ""},
		{"GET", "/tenants/" + globex.ID + "/webhooks/" + theirs.Endpoint.ID, ""},
		{"POST", "/tenants/" + globex.ID + "/alerts/spend-cap", "csrf=" + token + "&spend_cap_minor=1"},
		{"POST", "/tenants/" + globex.ID + "/webhooks", "csrf=" + token + "&url=http://127.0.0.1:9/x"},
	} {
		if got := b.status(c.method, c.path, c.body); got != http.StatusNotFound {
			t.Errorf("%s %s = %d, want 404", c.method, c.path, got)
		}
	}
	if got := b.status("GET", "/webhooks", ""); got != http.StatusForbidden {
		t.Errorf("GET /webhooks = %d, want 403", got)
	}
	if _, err := events.NewStore(admin.DB).Endpoint(ctx, globex.ID, theirs.Endpoint.ID); err != nil {
		t.Errorf("globex's endpoint: %v", err)
	}
	if g, err := qs.TenantSettings(ctx, globex.ID); err != nil || g.SpendCapMinor != nil {
		t.Errorf("globex's settings: %+v %v", g, err)
	}
}
