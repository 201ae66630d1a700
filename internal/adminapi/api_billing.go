package adminapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// BillingResponse is the body of GET /tenants/{tenantID}/billing: the
// tenant's billing account (null when it has none), its invoices, newest
// month first, and its credit top-ups bought through the provider.
type BillingResponse struct {
	Invoicing bool                    `json:"invoicing"`
	Mode      billing.InvoiceMode     `json:"mode,omitempty"`
	Account   *billing.Account        `json:"account"`
	Invoices  []billing.InvoiceRecord `json:"invoices"`
	TopUps    []billing.TopUp         `json:"top_ups"`
}

// tenantBilling reads tenant tenantID's billing.
func tenantBilling(ctx context.Context, ts *tenants.Store, inv *billing.Invoicing, tenantID string) (BillingResponse, error) {
	if _, err := ts.Get(ctx, tenantID); err != nil {
		return BillingResponse{}, err
	}
	res := BillingResponse{Invoicing: inv.Enabled()}
	if res.Invoicing {
		res.Mode = inv.Mode()
	}
	a, err := inv.Account(ctx, tenantID)
	switch {
	case err == nil:
		res.Account = &a
	case tollgate.ErrorCode(err) != tollgate.ENOTFOUND:
		return res, err
	}
	if res.Invoices, err = inv.Invoices(ctx, tenantID, nil); err != nil {
		return res, err
	}
	res.TopUps, err = inv.TopUps(ctx, tenantID)
	return res, err
}

// handleTenantBilling serves GET /tenants/{tenantID}/billing.
func handleTenantBilling(log *slog.Logger, ts *tenants.Store, inv *billing.Invoicing) http.Handler {
	return handleTenantRead(log, func(ctx context.Context, tenantID string) (BillingResponse, error) {
		return tenantBilling(ctx, ts, inv, tenantID)
	})
}

// handleTopUpOpen serves POST /tenants/{tenantID}/billing/top-ups: 201
// with the top-up and its checkout URL.
func handleTopUpOpen(log *slog.Logger, inv *billing.Invoicing) http.Handler {
	return handleCreate(log, decodeBody, tenantChange(inv.OpenTopUp),
		func(u billing.TopUp) string { return "/tenants/" + u.TenantID + "/billing" })
}

// ReconciliationResponse is the body of GET
// /months/{month}/reconciliation.
type ReconciliationResponse struct {
	Month string `json:"month"`
	// Differences counts the tenants whose statement and invoice differ.
	Differences int                      `json:"differences"`
	Tenants     []billing.Reconciliation `json:"tenants"`
}

// handleReconciliation serves GET /months/{month}/reconciliation.
func handleReconciliation(log *slog.Logger, inv *billing.Invoicing) http.Handler {
	return handlePath(log, http.StatusOK, func(r *http.Request) (usage.Month, error) {
		return usage.ParseMonth(chi.URLParam(r, "month"))
	}, func(r *http.Request, m usage.Month) (ReconciliationResponse, error) {
		list, err := inv.Reconcile(r.Context(), m)
		res := ReconciliationResponse{Month: m.String(), Tenants: list}
		for _, c := range list {
			if len(c.Differences) > 0 {
				res.Differences++
			}
		}
		return res, err
	})
}

// maxWebhookBody bounds a provider's webhook body.
const maxWebhookBody = 1 << 20

// handleProviderWebhook serves POST /billing/stripe/webhook, the payment
// provider's events: 400 for a bad or stale signature (nothing changes),
// 200 for an event applied, replayed, ignored, or about an invoice or
// top-up Tollgate does not know (logged; nothing changes), 404 with
// invoicing off. Stripe retries any other answer.
func handleProviderWebhook(log *slog.Logger, inv *billing.Invoicing) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !inv.Enabled() {
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.ENOTFOUND, "invoicing is off"))
			return
		}
		payload, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxWebhookBody))
		if err != nil {
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.ETOOLARGE, "the body is larger than %d bytes", maxWebhookBody))
			return
		}
		ev, err := inv.Provider().ParseEvent(payload, r.Header.Get("Stripe-Signature"))
		if err != nil {
			if errors.Is(err, billing.ErrBadSignature) {
				log.Warn("provider webhook refused: bad or stale signature")
				httpx.Error(w, r, log, &tollgate.Error{Code: tollgate.EMALFORMED, Message: "bad or stale Stripe-Signature",
					Fields: map[string]string{"Stripe-Signature": "does not verify with the webhook secret within the tolerance"}})
				return
			}
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.EMALFORMED, "%v", err))
			return
		}
		res, err := inv.ApplyEvent(r.Context(), ev)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		httpx.JSON(w, r, log, http.StatusOK, res)
	})
}
