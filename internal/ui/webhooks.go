package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/access"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Webhook endpoints have pages in two places, as in the API: the
// operators' (/webhooks: every endpoint, an operator's or a tenant's) and
// each tenant's (/tenants/{tenantID}/webhooks/…, listed on the tenant's
// alerts page: the endpoints its admins made). Every lookup is within the
// scope of the path (events.Store, events.Ops), so another tenant's
// endpoint is "not found" under one's own tenant.

// hookScope is whose endpoints a request is about.
type hookScope struct {
	// Tenant is the tenant of a tenant's path; nil on the operators'.
	Tenant *tenants.Tenant
	// Base is the path of the endpoints' pages; Home the page that lists
	// them (the operators' list, or the tenant's alerts page).
	Base, Home string
	// CanManage: the user may make, change and delete endpoints here.
	CanManage bool
}

// id is the scope events.Store and events.Ops take: "" or the tenant's.
func (s hookScope) id() string {
	if s.Tenant == nil {
		return ""
	}
	return s.Tenant.ID
}

// nav is the navigation entry of the scope's pages.
func (s hookScope) nav() string {
	if s.Tenant == nil {
		return "webhooks"
	}
	return "alerts"
}

// hookScopeOf returns the request's scope: the path's tenant, which must
// exist, or the operators'. The route has checked access.
func (c *Console) hookScopeOf(r *http.Request) (hookScope, error) {
	u := session(r).User
	id := chi.URLParam(r, "tenantID")
	if id == "" {
		return hookScope{Base: "/webhooks", Home: "/webhooks", CanManage: access.Operator(u) == nil}, nil
	}
	t, err := c.tenants.Get(r.Context(), id)
	if err != nil {
		return hookScope{}, err
	}
	base := "/tenants/" + url.PathEscape(t.ID)
	return hookScope{Tenant: &t, Base: base + "/webhooks", Home: base + "/alerts",
		CanManage: access.Tenant(u, t.ID, access.ManageKeys) == nil}, nil
}

// hookHandler serves a request with its scope.
func (c *Console) hookHandler(serve func(w http.ResponseWriter, r *http.Request, s hookScope)) http.Handler {
	return loadedHandler(c, c.hookScopeOf, serve)
}

// endpointRow is an endpoint as the lists and its page show it.
type endpointRow struct {
	events.Endpoint
	Path string
	// Owner is the name of the tenant whose endpoint it is ("" for an
	// operator's); Tenants the names of the tenants an operator's
	// endpoint receives (none: every tenant).
	Owner   string
	Tenants []string
	Badges  []badge
	// FailingDisabled: disabled by Tollgate after failing DisableAfter.
	FailingDisabled bool
	Last            *attemptView
	Pending         int
}

// attemptView is an attempt at a delivery as pages show it: its outcome
// as a badge (the response's status, or why none came) and its latency.
type attemptView struct {
	events.Attempt
	Badge   badge
	Latency string
}

func viewAttempt(a events.Attempt) attemptView {
	v := attemptView{Attempt: a, Latency: formatLatency(a.LatencyUS)}
	switch {
	case a.Status == nil:
		v.Badge = badge{"no response", "bad", a.Error}
	case *a.Status >= 200 && *a.Status < 300:
		v.Badge = badge{strconv.Itoa(*a.Status), "ok", "delivered"}
	default:
		v.Badge = badge{strconv.Itoa(*a.Status), "bad", a.Error}
	}
	return v
}

// formatLatency writes a latency in µs as milliseconds (or seconds).
func formatLatency(us int64) string {
	if us >= 10_000_000 {
		return strconv.FormatFloat(float64(us)/1e6, 'f', 1, 64) + " s"
	}
	return strconv.FormatFloat(float64(us)/1e3, 'f', 1, 64) + " ms"
}

// endpointBadges returns the badges of e: enabled, disabled (by hand or
// for failing), failing.
func endpointBadges(e events.Endpoint) []badge {
	switch {
	case e.DisabledAt != nil && e.DisabledReason == "failing":
		return []badge{{"disabled: failing", "bad", "disabled " + formatDateTime(*e.DisabledAt) + " after failing every attempt for " + span(events.DisableAfter)}}
	case e.DisabledAt != nil:
		return []badge{{"disabled", "neutral", "disabled " + formatDateTime(*e.DisabledAt)}}
	case e.FailingSince != nil:
		return []badge{{"enabled", "ok", ""}, {"failing", "warn", "every attempt has failed since " + formatDateTime(*e.FailingSince) +
			"; disabled " + formatDateTime(derefTime(e.DisablesAt)) + " unless one succeeds first"}}
	}
	return []badge{{"enabled", "ok", ""}}
}

// endpointRows describes list for people: names for tenant IDs, badges,
// and each endpoint's latest attempt.
func (c *Console) endpointRows(ctx context.Context, s hookScope, list []events.Endpoint) ([]endpointRow, error) {
	var ids, tenantIDs []string
	for _, e := range list {
		ids = append(ids, e.ID)
		tenantIDs = append(tenantIDs, e.TenantID)
		tenantIDs = append(tenantIDs, e.TenantIDs...)
	}
	names, err := c.tenants.Names(ctx, tenantIDs)
	if err != nil {
		return nil, err
	}
	health, err := c.events.Health(ctx, ids)
	if err != nil {
		return nil, err
	}
	rows := make([]endpointRow, 0, len(list))
	for _, e := range list {
		h := health[e.ID]
		row := endpointRow{Endpoint: e, Path: s.Base + "/" + url.PathEscape(e.ID), Owner: names[e.TenantID],
			Badges: endpointBadges(e), FailingDisabled: e.DisabledAt != nil && e.DisabledReason == "failing",
			Pending: h.Pending}
		if h.Last != nil {
			last := viewAttempt(*h.Last)
			row.Last = &last
		}
		for _, id := range e.TenantIDs {
			row.Tenants = append(row.Tenants, names[id])
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// endpointForm is the form that makes an endpoint, as typed.
type endpointForm struct {
	URL, Description string
	EventTypes       []string
	// Tenants: an operator's endpoint's tenants, names or IDs separated
	// by commas; empty for every tenant.
	Tenants string
}

// endpointsView is the endpoints part of a page: the list, the notices
// of endpoints disabled for failing or failing now (Failing, from
// events.Store.Troubled, whichever page of the list they are on), and the
// form that makes one.
type endpointsView struct {
	Scope   hookScope
	Rows    []endpointRow
	Failing []endpointRow
	Next    string
	Form    endpointForm
	Errors  map[string]string
	Types   []string
	CSRF    string
	// FormOpen: the form has errors to show.
	FormOpen bool
}

// endpointsView reads one page of the scope's endpoints.
func (c *Console) endpointsView(r *http.Request, s hookScope, pr page.Request, form endpointForm, errs map[string]string) (endpointsView, error) {
	pg, err := c.events.Endpoints(r.Context(), s.id(), pr)
	if err != nil {
		return endpointsView{}, err
	}
	v := endpointsView{Scope: s, Form: form, Errors: errs, Types: events.Types, CSRF: c.csrfToken(r), Next: nextPage(s.Home, r, pg.NextCursor)}
	for _, f := range []string{"url", "description", "event_types", "tenant_ids"} {
		v.FormOpen = v.FormOpen || errs[f] != ""
	}
	if v.Rows, err = c.endpointRows(r.Context(), s, pg.Items); err != nil {
		return endpointsView{}, err
	}
	troubled, err := c.events.Troubled(r.Context(), s.id())
	if err != nil {
		return endpointsView{}, err
	}
	if v.Failing, err = c.endpointRows(r.Context(), s, troubled); err != nil {
		return endpointsView{}, err
	}
	return v, nil
}

// Webhooks serves GET /webhooks (operators): every endpoint, newest
// first, and the form that makes an operator's endpoint.
func (c *Console) Webhooks() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		c.webhookList(w, r, s, http.StatusOK, endpointForm{}, nil)
	})
}

func (c *Console) webhookList(w http.ResponseWriter, r *http.Request, s hookScope, status int, form endpointForm, errs map[string]string) {
	pr, err := page.FromQuery(r.URL.Query())
	if err != nil {
		c.Error(w, r, err)
		return
	}
	v, err := c.endpointsView(r, s, pr, form, errs)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	c.render(w, r, status, "webhook_list", "webhooks", v)
}

// webhookHome shows the scope's list of endpoints again, with the
// endpoint form's values and errors.
func (c *Console) webhookHome(w http.ResponseWriter, r *http.Request, s hookScope, status int, form endpointForm, errs map[string]string) {
	if s.Tenant == nil {
		c.webhookList(w, r, s, status, form, errs)
		return
	}
	c.alertsView(w, r, *s.Tenant, status, alertForms{Endpoint: form, Errors: errs})
}

// fieldGroups folds the errors of a list's items ("event_types[2]") into
// the list's field ("event_types"), which the form shows them beside.
func fieldGroups(errs map[string]string, lists ...string) map[string]string {
	for k, v := range errs {
		for _, l := range lists {
			if strings.HasPrefix(k, l+"[") {
				errs[l] = v
			}
		}
	}
	return errs
}

// WebhookCreate serves POST /webhooks and /tenants/{tenantID}/webhooks:
// events.Ops.CreateEndpoint makes the endpoint, and the page shows its
// secret once.
func (c *Console) WebhookCreate() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		pf := r.PostForm
		form := endpointForm{URL: strings.TrimSpace(pf.Get("url")), Description: strings.TrimSpace(pf.Get("description")),
			EventTypes: pf["event_types"], Tenants: strings.TrimSpace(pf.Get("tenants"))}
		in := events.EndpointInput{URL: form.URL, Description: form.Description, EventTypes: form.EventTypes}
		fe := formErrors{}
		if s.Tenant == nil {
			in.TenantIDs = c.tenantIDs(r.Context(), form.Tenants, fe)
		}
		reshow := func(status int, errs map[string]string) {
			c.webhookHome(w, r, s, status, form, fieldGroups(errs, "event_types", "tenant_ids"))
		}
		res, ok := saveForm(c, w, r, fe, reshow, func() (events.IssuedEndpoint, error) {
			return c.cfg.Events.CreateEndpoint(r.Context(), actor(r), s.id(), in)
		})
		if !ok {
			return
		}
		c.showHookSecret(w, r, s, res, false)
	})
}

// tenantIDs resolves a comma-separated list of tenant names or IDs,
// naming the field tenant_ids when one names no tenant.
func (c *Console) tenantIDs(ctx context.Context, list string, fe formErrors) []string {
	var ids []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case tollgate.IsUUID(name):
			ids = append(ids, name)
		default:
			t, err := c.tenants.GetByName(ctx, name)
			if err != nil {
				fe["tenant_ids"] = "no tenant is named " + strconv.Quote(name)
				continue
			}
			ids = append(ids, t.ID)
		}
	}
	return ids
}

// hookSecretPage shows an endpoint's signing secret, the only time it is
// shown: the answer to the form that made the endpoint or rotated it.
type hookSecretPage struct {
	Endpoint endpointRow
	Secret   string
	Rotated  bool
}

func (c *Console) showHookSecret(w http.ResponseWriter, r *http.Request, s hookScope, res events.IssuedEndpoint, rotated bool) {
	rows, err := c.endpointRows(r.Context(), s, []events.Endpoint{res.Endpoint})
	if err != nil {
		c.Error(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	c.render(w, r, http.StatusCreated, "webhook_secret", s.nav(), hookSecretPage{Endpoint: rows[0], Secret: res.Secret, Rotated: rotated})
}

// webhookPage is the data of an endpoint's page: what it receives, how
// its deliveries went, attempt by attempt, and its actions.
type webhookPage struct {
	Scope      hookScope
	Endpoint   endpointRow
	Deliveries []deliveryRow
	Next       string
	Replay     replayForm
	Errors     map[string]string
}

type deliveryRow struct {
	events.Delivery
	Badges   []badge
	Attempts []attemptView
}

// replayForm is the form that replays an endpoint's events of a time
// range (UTC), as typed.
type replayForm struct {
	From, To string
}

func deliveryBadge(d events.Delivery) badge {
	switch d.State {
	case "delivered":
		return badge{"delivered", "ok", ""}
	case "failed":
		return badge{"failed", "bad", "every attempt of the schedule failed"}
	}
	if len(d.Attempts) > 0 {
		return badge{"retrying", "warn", ""}
	}
	return badge{"pending", "info", ""}
}

// WebhookView serves GET /webhooks/{endpointID} and
// /tenants/{tenantID}/webhooks/{endpointID}.
func (c *Console) WebhookView() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		now := c.now().UTC().Truncate(time.Minute)
		c.webhookView(w, r, s, http.StatusOK, replayForm{From: localDateTime(now.Add(-24 * time.Hour)), To: localDateTime(now.Add(time.Minute))}, nil)
	})
}

func localDateTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04") }

func (c *Console) webhookView(w http.ResponseWriter, r *http.Request, s hookScope, status int, form replayForm, errs map[string]string) {
	ctx := r.Context()
	pr, err := page.FromQuery(r.URL.Query())
	if err != nil {
		c.Error(w, r, err)
		return
	}
	e, err := c.events.Endpoint(ctx, s.id(), chi.URLParam(r, "endpointID"))
	if err != nil {
		c.Error(w, r, err)
		return
	}
	rows, err := c.endpointRows(ctx, s, []events.Endpoint{e})
	if err != nil {
		c.Error(w, r, err)
		return
	}
	pg, err := c.events.Deliveries(ctx, s.id(), e.ID, pr)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	p := webhookPage{Scope: s, Endpoint: rows[0], Replay: form, Errors: errs, Next: nextPage(s.Base+"/"+url.PathEscape(e.ID), r, pg.NextCursor)}
	for _, d := range pg.Items {
		row := deliveryRow{Delivery: d, Badges: []badge{deliveryBadge(d)}}
		for _, a := range d.Attempts {
			row.Attempts = append(row.Attempts, viewAttempt(a))
		}
		p.Deliveries = append(p.Deliveries, row)
	}
	c.render(w, r, status, "webhook_view", s.nav(), p)
}

// endpointAction serves POST …/webhooks/{endpointID}/{verb}: an
// events.Ops change of the endpoint, then back to its page with done,
// after confirmation when confirm is not "".
func (c *Console) endpointAction(confirm string, change func(ctx context.Context, r *http.Request, s hookScope, id string) (string, error)) http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		id := chi.URLParam(r, "endpointID")
		back := s.Base + "/" + url.PathEscape(id)
		if confirm != "" && !confirmed(r) {
			e, err := c.events.Endpoint(r.Context(), s.id(), id)
			if err != nil {
				c.Error(w, r, err)
				return
			}
			c.askConfirmation(w, r, s.nav(), confirmPage{Heading: confirm + "?",
				Message: e.URL + " will receive no new events, and its pending deliveries wait, until it is enabled again.",
				Button:  confirm, Back: back})
			return
		}
		done, err := change(r.Context(), r, s, id)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		redirect(w, r, back, done)
	})
}

// WebhookDisable serves POST …/{endpointID}/disable and /enable.
func (c *Console) WebhookDisable(disable bool) http.Handler {
	if disable {
		return c.endpointAction("Disable the endpoint", func(ctx context.Context, r *http.Request, s hookScope, id string) (string, error) {
			_, err := c.cfg.Events.Disable(ctx, actor(r), s.id(), id)
			return "Endpoint disabled: it receives nothing until you enable it.", err
		})
	}
	return c.endpointAction("", func(ctx context.Context, r *http.Request, s hookScope, id string) (string, error) {
		_, err := c.cfg.Events.Enable(ctx, actor(r), s.id(), id)
		return "Endpoint enabled: its pending deliveries go out again.", err
	})
}

// WebhookTest serves POST …/{endpointID}/test: a webhook.test event, to
// this endpoint alone.
func (c *Console) WebhookTest() http.Handler {
	return c.endpointAction("", func(ctx context.Context, r *http.Request, s hookScope, id string) (string, error) {
		ev, err := c.cfg.Events.SendTest(ctx, actor(r), s.id(), id)
		return "Test event " + ev.ID + " sent: its delivery shows below.", err
	})
}

// WebhookRotate serves POST …/{endpointID}/rotate: a new secret, shown
// once; the previous one keeps signing beside it for
// events.RotationOverlap.
func (c *Console) WebhookRotate() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		res, err := c.cfg.Events.RotateSecret(r.Context(), actor(r), s.id(), chi.URLParam(r, "endpointID"))
		if err != nil {
			c.Error(w, r, err)
			return
		}
		c.showHookSecret(w, r, s, res, true)
	})
}

// WebhookDelete serves POST …/{endpointID}/delete, after confirmation:
// the endpoint goes, with its deliveries.
func (c *Console) WebhookDelete() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		id := chi.URLParam(r, "endpointID")
		if !confirmed(r) {
			e, err := c.events.Endpoint(r.Context(), s.id(), id)
			if err != nil {
				c.Error(w, r, err)
				return
			}
			c.askConfirmation(w, r, s.nav(), confirmPage{Heading: "Delete the endpoint?",
				Message: e.URL + " will receive nothing more, and its delivery log goes with it. This cannot be undone.",
				Button:  "Delete endpoint", Back: s.Base + "/" + url.PathEscape(id)})
			return
		}
		if err := c.cfg.Events.DeleteEndpoint(r.Context(), actor(r), s.id(), id); err != nil {
			c.Error(w, r, err)
			return
		}
		redirect(w, r, s.Home, "Endpoint deleted.")
	})
}

// WebhookReplay serves POST …/{endpointID}/replay: one event (event_id,
// from the delivery log) or every event of the form's time range, sent
// again as new deliveries with the events' own webhook-id.
func (c *Console) WebhookReplay() http.Handler {
	return c.hookHandler(func(w http.ResponseWriter, r *http.Request, s hookScope) {
		id := chi.URLParam(r, "endpointID")
		pf := r.PostForm
		form := replayForm{From: strings.TrimSpace(pf.Get("from")), To: strings.TrimSpace(pf.Get("to"))}
		fe := formErrors{}
		in := events.ReplayInput{EventID: strings.TrimSpace(pf.Get("event_id"))}
		if in.EventID == "" {
			in.From, in.To = fe.dateTime(pf, "from"), fe.dateTime(pf, "to")
			// A value that is no date keeps dateTime's hint.
			if form.From == "" {
				fe["from"] = "is required"
			}
			if form.To == "" {
				fe["to"] = "is required"
			}
		}
		reshow := func(status int, errs map[string]string) { c.webhookView(w, r, s, status, form, errs) }
		res, ok := saveForm(c, w, r, fe, reshow, func() (events.Replayed, error) {
			return c.cfg.Events.Replay(r.Context(), actor(r), s.id(), id, in)
		})
		if !ok {
			return
		}
		msg := "Replayed: " + formatInt(int64(res.Deliveries)) + " deliveries queued."
		if res.Deliveries == 1 {
			msg = "Replayed: 1 delivery queued."
		}
		redirect(w, r, s.Base+"/"+url.PathEscape(id), msg)
	})
}

// eventRow is an event as the alerts page lists it.
type eventRow struct {
	events.Event
	Payload string
}

// eventRows describes list for people: its payload as compact JSON.
func eventRows(list []events.Event) []eventRow {
	rows := make([]eventRow, 0, len(list))
	for _, e := range list {
		row := eventRow{Event: e}
		if raw, ok := e.Data.(json.RawMessage); ok {
			row.Payload = string(raw)
		}
		rows = append(rows, row)
	}
	return rows
}

// HasType reports whether the form chose event type typ.
func (f endpointForm) HasType(typ string) bool { return slices.Contains(f.EventTypes, typ) }
