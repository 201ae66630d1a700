// Package stripetest runs a local Stripe for tests: stripe-mock (Stripe's
// own mock of its API, built from the module's tool dependency) behind a
// recording proxy. The mock checks every request against Stripe's API
// description and answers with fixtures; the proxy records what was sent
// (paths, forms, idempotency keys), answers a repeated idempotency key
// with the first answer as Stripe does, gives what is created IDs of its
// own and remembers the invoices made (their lines, totals, states and
// metadata, listed a page at a time), and can fail requests, so tests
// assert on what reached "Stripe" and on how a push recovers. Nothing
// here reaches the real Stripe.
package stripetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v84/webhook"

	"github.com/tollgate/tollgate/internal/testenv"
)

// The test settings: a key and a webhook secret of the right forms.
const (
	SecretKey     = "sk_test_tollgate0123456789abcdef"
	WebhookSecret = "whsec_tollgatetest0123456789abcdef"
)

// mockVersion is stripe-mock's version (go.mod's tool dependency).
const mockVersion = "v0.203.0"

// mock builds stripe-mock once per test binary.
var mock testenv.ToolBuild

// Request is one request the proxy received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	Form   url.Values
	// IdempotencyKey is the Idempotency-Key header.
	IdempotencyKey string
	// Status is what the proxy answered; Replayed is true when it
	// answered a repeated idempotency key with the first answer.
	Status   int
	Replayed bool
	// Authorized is true when the request carried the test key.
	Authorized bool
}

// Server is a local Stripe for one test.
type Server struct {
	// URL is the proxy's: the Stripe API URL to configure.
	URL  string
	mock string

	mu       sync.Mutex
	requests []Request
	down     int // status to answer every request with; 0: up
	drop     func(Request) bool
	answers  map[string]answer
	seq      int
	invoices map[string]*invoice
	order    []string
}

type answer struct {
	status int
	body   []byte
}

type invoice struct {
	ID, Customer, Currency, Status string
	Metadata                       map[string]string
	Total                          int64
	Lines                          []map[string]any
}

// Start runs stripe-mock and the proxy in front of it until the test
// ends.
func Start(t testing.TB) *Server {
	t.Helper()
	addr := testenv.FreeAddr(t)
	// stripe-mock also serves HTTPS, on :12112 unless told otherwise: a
	// port of the system's choosing on loopback keeps two mocks (two
	// packages' tests at once) from failing on it.
	bin := mock.Binary(t, "github.com/stripe/stripe-mock", "stripe-mock", mockVersion)
	cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", "127.0.0.1:0")
	p := testenv.StartProcess(t, "stripe-mock", cmd, syscall.SIGTERM, 5*time.Second, nil)
	testenv.Eventually(t, time.Now(), 30*time.Second, "stripe-mock listening", func() (bool, string) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return true, ""
		}
		select {
		case <-p.Exited():
			t.Fatalf("stripe-mock exited: %v\n%s", p.Err(), p.Output())
		default:
		}
		return false, p.Output()
	})
	s := &Server{mock: "http://" + addr, answers: map[string]answer{}, invoices: map[string]*invoice{}}
	proxy := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(proxy.Close)
	s.URL = proxy.URL
	return s
}

// Settings are the admin server's Stripe settings pointing at s.
func (s *Server) Settings() map[string]string {
	return map[string]string{
		"TOLLGATE_STRIPE_SECRET_KEY":     SecretKey,
		"TOLLGATE_STRIPE_WEBHOOK_SECRET": WebhookSecret,
		"TOLLGATE_STRIPE_API_URL":        s.URL,
	}
}

// Down makes the proxy answer every request with status (a 5xx) without
// passing it on; 0 brings it back.
func (s *Server) Down(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = status
}

// DropAnswer makes the next request that match selects reach Stripe and
// take effect, and its answer be lost: the client sees the connection
// close, as after a crash between Stripe's answer and the caller's
// commit.
func (s *Server) DropAnswer(match func(Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop = match
}

// ForgetKeys forgets the idempotency keys seen, as Stripe does after 24
// hours: a repeated key then makes something new.
func (s *Server) ForgetKeys() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = map[string]answer{}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Invoice is an invoice made at the local Stripe, as it now stands.
type Invoice struct {
	ID, Customer, Currency, Status string
	Metadata                       map[string]string
	Total                          int64
	// Lines are the invoice items' forms: amount, description, metadata.
	Lines []map[string]any
}

// Invoices returns the invoices made, in order.
func (s *Server) Invoices() []Invoice {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Invoice
	for _, id := range s.order {
		in := s.invoices[id]
		out = append(out, Invoice{ID: in.ID, Customer: in.Customer, Currency: in.Currency, Status: in.Status,
			Metadata: in.Metadata, Total: in.Total, Lines: append([]map[string]any(nil), in.Lines...)})
	}
	return out
}

// AddInvoices makes n paid invoices of customer's at the local Stripe,
// newer than those made so far, as if made there by something other than
// Tollgate: a customer with a long history.
func (s *Server) AddInvoices(customer string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.seq++
		in := &invoice{ID: "in_tg" + strconv.Itoa(s.seq), Customer: customer, Currency: "usd", Status: "paid",
			Metadata: map[string]string{}}
		s.invoices[in.ID] = in
		s.order = append(s.order, in.ID)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	req := Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Form: form,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Authorized: r.Header.Get("Authorization") == "Bearer "+SecretKey}
	s.mu.Lock()
	if s.down != 0 {
		req.Status = s.down
		s.requests = append(s.requests, req)
		s.mu.Unlock()
		writeJSON(w, req.Status, []byte(`{"error":{"type":"api_error","message":"the local Stripe is down"}}`))
		return
	}
	idem := ""
	if req.IdempotencyKey != "" {
		idem = r.Method + " " + r.URL.Path + " " + req.IdempotencyKey
		if a, ok := s.answers[idem]; ok {
			req.Status, req.Replayed = a.status, true
			s.requests = append(s.requests, req)
			s.mu.Unlock()
			writeJSON(w, a.status, a.body)
			return
		}
	}
	drop := s.drop != nil && s.drop(req)
	if drop {
		s.drop = nil
	}
	s.mu.Unlock()

	status, out := s.forward(r, body)
	s.mu.Lock()
	if status == http.StatusOK {
		out = s.model(req, out)
	}
	req.Status = status
	if idem != "" && status < 500 {
		s.answers[idem] = answer{status, out}
	}
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	if drop {
		// Half an answer, then the connection closes: the client cannot
		// take it for a request never received and send it again.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", len(out))
				c.Close()
				return
			}
		}
	}
	writeJSON(w, status, out)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_local")
	w.WriteHeader(status)
	w.Write(body) //nolint:errcheck // the client went away
}

// forward passes the request on to stripe-mock.
func (s *Server) forward(r *http.Request, body []byte) (int, []byte) {
	req, err := http.NewRequest(r.Method, s.mock+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 500, []byte(`{"error":{"message":"proxy"}}`)
	}
	req.Header = r.Header.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 502, []byte(`{"error":{"type":"api_error","message":"stripe-mock unreachable"}}`)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return res.StatusCode, out
}

// model makes the fixture answer out of what was asked look like
// Stripe's: fresh IDs for what is created, and the invoices as they were
// made (customer, currency, metadata, lines, total, status). Called with
// s.mu held.
func (s *Server) model(req Request, out []byte) []byte {
	var obj map[string]any
	if json.Unmarshal(out, &obj) != nil {
		return out
	}
	parts := strings.Split(strings.Trim(req.Path, "/"), "/")
	next := func(prefix string) string {
		s.seq++
		return prefix + "tg" + strconv.Itoa(s.seq)
	}
	metadata := func() map[string]string {
		m := map[string]string{}
		for k, vs := range req.Form {
			if name, ok := strings.CutPrefix(k, "metadata["); ok {
				m[strings.TrimSuffix(name, "]")] = vs[0]
			}
		}
		return m
	}
	post := req.Method == "POST"
	switch {
	case post && req.Path == "/v1/customers":
		obj["id"] = next("cus_")
	case post && req.Path == "/v1/checkout/sessions":
		id := next("cs_test_")
		obj["id"], obj["url"], obj["metadata"] = id, "https://checkout.stripe.test/"+id, metadata()
	case post && req.Path == "/v1/invoices":
		in := &invoice{ID: next("in_"), Customer: req.Form.Get("customer"), Currency: req.Form.Get("currency"),
			Status: "draft", Metadata: metadata()}
		s.invoices[in.ID] = in
		s.order = append(s.order, in.ID)
		return in.json(obj)
	case post && req.Path == "/v1/invoiceitems":
		if in, ok := s.invoices[req.Form.Get("invoice")]; ok {
			amount, _ := strconv.ParseInt(req.Form.Get("amount"), 10, 64)
			in.Total += amount
			in.Lines = append(in.Lines, map[string]any{"id": next("il_"), "object": "line_item", "amount": amount,
				"currency": req.Form.Get("currency"), "description": req.Form.Get("description"), "metadata": metadata()})
		}
	case req.Path == "/v1/invoices" && req.Method == "GET":
		// Newest first, a page of limit (10 unless given) after
		// starting_after, as Stripe pages.
		var list []*invoice
		for i := len(s.order) - 1; i >= 0; i-- {
			in := s.invoices[s.order[i]]
			if c := req.Query.Get("customer"); c == "" || c == in.Customer {
				list = append(list, in)
			}
		}
		from, limit := 0, 10
		if n, err := strconv.Atoi(req.Query.Get("limit")); err == nil && n > 0 {
			limit = n
		}
		if after := req.Query.Get("starting_after"); after != "" {
			for i, in := range list {
				if in.ID == after {
					from = i + 1
				}
			}
		}
		to := min(from+limit, len(list))
		var data []any
		for _, in := range list[from:to] {
			data = append(data, json.RawMessage(in.json(cloneOf(obj, "data"))))
		}
		obj["data"], obj["has_more"] = orEmpty(data), to < len(list)
	case len(parts) >= 3 && parts[1] == "invoices":
		in, ok := s.invoices[parts[2]]
		if !ok {
			return out
		}
		switch {
		case len(parts) == 4 && parts[3] == "lines":
			var data []any
			for _, l := range in.Lines {
				data = append(data, l)
			}
			obj["data"], obj["has_more"] = orEmpty(data), false
			return marshal(obj)
		case post && len(parts) == 4 && parts[3] == "finalize":
			in.Status = "open"
		case post && len(parts) == 3:
			for k, v := range metadata() {
				in.Metadata[k] = v
			}
		}
		return in.json(obj)
	}
	return marshal(obj)
}

// cloneOf returns the first object of list field name of obj, a list
// fixture, to build items of the list from.
func cloneOf(obj map[string]any, name string) map[string]any {
	if list, ok := obj[name].([]any); ok && len(list) > 0 {
		if m, ok := list[0].(map[string]any); ok {
			c := map[string]any{}
			for k, v := range m {
				c[k] = v
			}
			return c
		}
	}
	return map[string]any{"object": "invoice"}
}

func orEmpty(list []any) []any {
	if list == nil {
		return []any{}
	}
	return list
}

// json returns the fixture invoice obj as in stands.
func (in *invoice) json(obj map[string]any) []byte {
	obj["id"], obj["customer"], obj["currency"], obj["status"] = in.ID, in.Customer, in.Currency, in.Status
	obj["metadata"], obj["total"], obj["amount_due"], obj["subtotal"] = in.Metadata, in.Total, in.Total, in.Total
	obj["lines"] = map[string]any{"object": "list", "data": orEmpty(nil), "has_more": false, "url": "/v1/invoices/" + in.ID + "/lines"}
	return marshal(obj)
}

func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Sign returns the Stripe-Signature header of payload at time at, signed
// with secret.
func Sign(payload []byte, secret string, at time.Time) string {
	return fmt.Sprintf("t=%d,v1=%x", at.Unix(), webhook.ComputeSignature(at, payload, secret))
}

// InvoiceEvent is the payload of a Stripe invoice event (typ such as
// "invoice.paid") about invoice in.
func InvoiceEvent(id, typ string, in Invoice, at time.Time) []byte {
	paid := int64(0)
	if typ == "invoice.paid" {
		paid = in.Total
	}
	return marshal(map[string]any{"id": id, "object": "event", "type": typ, "created": at.Unix(), "api_version": "2026-02-25.clover",
		"data": map[string]any{"object": map[string]any{"id": in.ID, "object": "invoice", "customer": in.Customer,
			"currency": in.Currency, "total": in.Total, "amount_paid": paid, "metadata": in.Metadata, "status": "paid"}}})
}

// CheckoutEvent is the payload of checkout.session.completed for session
// sessionID, whose metadata names top-up topUpID.
func CheckoutEvent(id, sessionID, topUpID, paymentStatus string, at time.Time) []byte {
	return marshal(map[string]any{"id": id, "object": "event", "type": "checkout.session.completed", "created": at.Unix(),
		"data": map[string]any{"object": map[string]any{"id": sessionID, "object": "checkout.session",
			"payment_status": paymentStatus, "metadata": map[string]string{"tollgate_topup": topUpID}}}})
}
