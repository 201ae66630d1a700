package checkapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/region"
)

// ForwardedHeader names the region whose check API forwarded a
// settlement, renewal or release to the region that keeps the hold or
// lease: the receiving region answers it itself, never forwards it on.
const ForwardedHeader = "Tollgate-Forwarded-From"

// regionForwarder sends a settlement, renewal or release of a hold or
// lease another region keeps to that region's check API
// (docs/regions.md, "Money": the record lives in its region's Redis,
// beside the states it took from). The caller's service token goes
// with it; every region verifies it against the one Postgres's keys.
type regionForwarder struct {
	region region.Config
	client *http.Client
	log    *slog.Logger
}

func newRegionForwarder(c region.Config, log *slog.Logger) *regionForwarder {
	return &regionForwarder{region: c, log: log, client: &http.Client{Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// forward answers r, whose decoded body is req, with the answer of the
// check API of region owner, which keeps the record r names, to the
// same call. A region without owner's URL answers not found, naming
// owner; an owner that does not answer, unavailable (the caller
// retries: settlements, renewals and releases may be repeated).
func (f *regionForwarder) forward(w http.ResponseWriter, r *http.Request, owner string, req any) {
	if from := r.Header.Get(ForwardedHeader); from != "" {
		if f.region.Index(from) < 0 {
			from = "another region" // the header is the caller's to set: named only when it names a region
		}
		f.log.WarnContext(r.Context(), "region: a forwarded call names a hold or lease of a third region; check the regions' TOLLGATE_REGION_CHECK_URLS",
			"from", from, "region", owner, "path", r.URL.Path)
		httpx.Error(w, r, f.log, tollgate.Errorf(tollgate.EUNAVAILABLE,
			"%s forwarded this to region %s, which does not keep it either (it names region %s): check their TOLLGATE_REGION_CHECK_URLS", from, f.region.Name, owner))
		return
	}
	base, ok := f.region.CheckURLs[owner]
	if !ok {
		f.log.WarnContext(r.Context(), "region: a call names a hold or lease of a region this one has no check URL of (TOLLGATE_REGION_CHECK_URLS)",
			"region", owner, "path", r.URL.Path)
		httpx.Error(w, r, f.log, tollgate.Errorf(tollgate.ENOTFOUND,
			"it was opened in region %s: send it there (this region's TOLLGATE_REGION_CHECK_URLS names no check API of region %s)", owner, owner))
		return
	}
	body, err := json.Marshal(req)
	if err != nil {
		httpx.Error(w, r, f.log, err)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, base+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		httpx.Error(w, r, f.log, err)
		return
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Authorization", r.Header.Get("Authorization"))
	out.Header.Set(ForwardedHeader, f.region.Name)
	res, err := f.client.Do(out)
	var answer []byte
	if err == nil {
		answer, err = io.ReadAll(io.LimitReader(res.Body, MaxCheckBody+1))
		res.Body.Close()
	}
	switch {
	case r.Context().Err() != nil:
		return // the caller went away: nobody to answer
	case err != nil:
		f.log.WarnContext(r.Context(), "region: forwarding to the region that keeps a hold or lease failed", "region", owner, "path", r.URL.Path, "err", err)
	case !checkAPIAnswer(res, answer):
		// Not the owner's check API answering (a proxy's 502, a
		// redirect, a page): the caller is told to retry, as when
		// nothing answers.
		f.log.WarnContext(r.Context(), "region: the region that keeps a hold or lease answered a forwarded call with what its check API does not send",
			"region", owner, "path", r.URL.Path, "status", res.StatusCode, "content_type", res.Header.Get("Content-Type"))
	default:
		for _, h := range []string{"Content-Type", "Retry-After"} {
			if v := res.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(answer)
		return
	}
	httpx.Error(w, r, f.log, tollgate.Errorf(tollgate.EUNAVAILABLE, "region %s, which keeps it, did not answer; retry", owner))
}

// checkAPIAnswer reports whether res, whose body is answer, is what a
// check API answers a settlement, renewal or release: JSON (a result or
// a problem) of a status it uses, and whole.
func checkAPIAnswer(res *http.Response, answer []byte) bool {
	mediaType, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	isJSON := mediaType == "application/json" || mediaType == "application/problem+json"
	status := res.StatusCode == http.StatusOK || res.StatusCode >= 400 && res.StatusCode < 500 || res.StatusCode == http.StatusServiceUnavailable
	return isJSON && status && len(answer) <= MaxCheckBody
}

// handleHeld serves a call on one hold or lease: it decodes the body into
// a Req, forwards the call to the region that keeps the hold when that is
// another (id names the hold), and answers what serve returns otherwise.
func handleHeld[Req any](checker *enforce.Checker, regions *regionForwarder, log *slog.Logger, id func(*Req) string, serve func(context.Context, *Req) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Req
		if err := httpx.Decode(r, MaxCheckBody, &req); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		if owner := checker.HoldRegion(id(&req)); owner != "" {
			regions.forward(w, r, owner, req)
			return
		}
		out, err := serve(r.Context(), &req)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		httpx.JSON(w, r, log, http.StatusOK, out)
	})
}
