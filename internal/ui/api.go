package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/httpx"
)

// call makes one request to the admin API in-process, on behalf of r's
// user, and decodes a successful answer into out (when not nil). The API
// request carries r's context, and with it the session the console
// verified: the API checks access, validates and audits the change as for
// any client. A refusal comes back as the *tollgate.Error of the API's
// problem+json, with its field errors. The response's cookies (sign-in
// and sign-out) are passed on to w when w is not nil.
func (c *Console) call(w http.ResponseWriter, r *http.Request, method, path string, body, out any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("ui: encode %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	// A fresh routing context: the API's router must route the path
	// itself rather than take the console's routing for its own.
	ctx := context.WithValue(r.Context(), chi.RouteCtxKey, nil)
	req, err := http.NewRequestWithContext(ctx, method, path, rd)
	if err != nil {
		return fmt.Errorf("ui: %s %s: %w", method, path, err)
	}
	req.RemoteAddr, req.TLS = r.RemoteAddr, r.TLS
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		req.Header.Set("X-Forwarded-Proto", p)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tollgate-console")
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	c.cfg.API.ServeHTTP(rec, req)
	if w != nil {
		for _, ck := range rec.header.Values("Set-Cookie") {
			w.Header().Add("Set-Cookie", ck)
		}
	}
	if rec.status >= 400 {
		var p httpx.Problem
		if err := json.Unmarshal(rec.body.Bytes(), &p); err != nil || p.Code == "" {
			return fmt.Errorf("ui: %s %s: status %d", method, path, rec.status)
		}
		return &tollgate.Error{Code: p.Code, Message: p.Detail, Fields: p.Errors}
	}
	if out != nil && rec.body.Len() > 0 {
		if err := json.Unmarshal(rec.body.Bytes(), out); err != nil {
			return fmt.Errorf("ui: decode %s %s: %w", method, path, err)
		}
	}
	return nil
}

// recorder keeps an in-process API response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wrote {
		r.status, r.wrote = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
