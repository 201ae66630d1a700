package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"slices"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
)

// Webhook endpoints and events live in two places with the same routes:
// an operator's under /webhooks/endpoints and /events (every endpoint and
// event), a tenant's under /tenants/{tenantID}/webhooks/endpoints and
// /tenants/{tenantID}/events (the endpoints its admins made, its events).
// Every lookup is within the scope of the path, so another tenant's
// endpoint is 404 under one's own tenant.

// webhookScope returns the scope of a request: "" for the operators'
// routes, the path's tenant (which must exist) for a tenant's.
type webhookScope func(r *http.Request) (string, error)

// operatorScope is the scope of the operators' routes: everything.
func operatorScope(*http.Request) (string, error) { return "", nil }

// tenantScope is the scope of /tenants/{tenantID}/…: the tenant's.
func tenantScope(ts *tenants.Store) webhookScope {
	return func(r *http.Request) (string, error) {
		id := chi.URLParam(r, "tenantID")
		_, err := ts.Get(r.Context(), id)
		return id, err
	}
}

// webhookRoutes lists the webhook and event routes at prefix ("" or
// "/tenants/{tenantID}"): reads on read, changes on change.
func webhookRoutes(read, change chi.Router, prefix string, scope webhookScope, ops *events.Ops, es *events.Store, log *slog.Logger) {
	ep := prefix + "/webhooks/endpoints"
	one := ep + "/{endpointID}"
	read.Method("GET", prefix+"/events", handleEventList(log, es, scope))
	read.Method("GET", ep, handlePage(log, scope, es.Endpoints))
	change.Method("POST", ep, handleEndpointCreate(log, ops, scope))
	read.Method("GET", one, handleEndpointGet(log, es, scope))
	change.Method("DELETE", one, handleEndpointDelete(log, ops, scope))
	change.Method("POST", one+"/rotate", handleEndpointChange(log, scope, http.StatusCreated, ops.RotateSecret))
	change.Method("POST", one+"/disable", handleEndpointChange(log, scope, http.StatusOK, ops.Disable))
	change.Method("POST", one+"/enable", handleEndpointChange(log, scope, http.StatusOK, ops.Enable))
	change.Method("POST", one+"/test", handleEndpointChange(log, scope, http.StatusAccepted, ops.SendTest))
	change.Method("POST", one+"/replay", handleEndpointReplay(log, ops, scope))
	read.Method("GET", one+"/deliveries", handlePage(log, func(r *http.Request) (endpointOf, error) {
		s, err := scope(r)
		return endpointOf{scope: s, id: chi.URLParam(r, "endpointID")}, err
	}, func(ctx context.Context, e endpointOf, pr page.Request) (page.Page[events.Delivery], error) {
		return es.Deliveries(ctx, e.scope, e.id, pr)
	}))
}

// endpointOf names an endpoint within a scope.
type endpointOf struct{ scope, id string }

// handleEventList serves GET …/events[?type=…], newest first.
func handleEventList(log *slog.Logger, es *events.Store, scope webhookScope) http.Handler {
	type filter struct{ scope, typ string }
	return handlePage(log, func(r *http.Request) (filter, error) {
		s, err := scope(r)
		typ := r.URL.Query().Get("type")
		if err == nil && typ != "" && !slices.Contains(events.Types, typ) {
			err = tollgate.Invalid(map[string]string{"type": "is not an event type"})
		}
		return filter{s, typ}, err
	}, func(ctx context.Context, f filter, pr page.Request) (page.Page[events.Event], error) {
		return es.Events(ctx, f.scope, f.typ, pr)
	})
}

// handleEndpointCreate serves POST …/webhooks/endpoints: the answer holds
// the secret, shown this once.
func handleEndpointCreate(log *slog.Logger, ops *events.Ops, scope webhookScope) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner, err := scope(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		var in events.EndpointInput
		if err := decodeBody(r, &in); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		res, err := ops.CreateEndpoint(r.Context(), actorOf(r), owner, in)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.Header().Set("Location", r.URL.Path+"/"+res.Endpoint.ID)
		httpx.JSON(w, r, log, http.StatusCreated, res)
	})
}

// handleEndpointGet serves GET …/webhooks/endpoints/{endpointID}.
func handleEndpointGet(log *slog.Logger, es *events.Store, scope webhookScope) http.Handler {
	return handlePath(log, http.StatusOK, scope, func(r *http.Request, s string) (events.Endpoint, error) {
		return es.Endpoint(r.Context(), s, chi.URLParam(r, "endpointID"))
	})
}

// handleEndpointDelete serves DELETE …/webhooks/endpoints/{endpointID}.
func handleEndpointDelete(log *slog.Logger, ops *events.Ops, scope webhookScope) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := scope(r)
		if err == nil {
			err = ops.DeleteEndpoint(r.Context(), actorOf(r), s, chi.URLParam(r, "endpointID"))
		}
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// handleEndpointChange serves a change to one endpoint that takes no
// body (rotate, disable, enable, test), answering change's result with
// status.
func handleEndpointChange[T any](log *slog.Logger, scope webhookScope, status int,
	change func(ctx context.Context, by audit.Actor, scope, id string) (T, error)) http.Handler {
	return handlePath(log, status, scope, func(r *http.Request, s string) (T, error) {
		return change(r.Context(), actorOf(r), s, chi.URLParam(r, "endpointID"))
	})
}

// handleEndpointReplay serves POST …/webhooks/endpoints/{endpointID}/replay.
func handleEndpointReplay(log *slog.Logger, ops *events.Ops, scope webhookScope) http.Handler {
	return handlePath(log, http.StatusAccepted, scope, func(r *http.Request, s string) (events.Replayed, error) {
		var in events.ReplayInput
		if err := decodeBody(r, &in); err != nil {
			return events.Replayed{}, err
		}
		return ops.Replay(r.Context(), actorOf(r), s, chi.URLParam(r, "endpointID"), in)
	})
}
