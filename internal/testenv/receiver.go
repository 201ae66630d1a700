package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// ReceiverReply is what a Receiver answers every request with.
const ReceiverReply = "thanks from the receiver"

// Received is one request a Receiver got: its Standard Webhooks headers,
// its body and when it arrived.
type Received struct {
	ID, Timestamp, Signature string
	Body                     []byte
	At                       time.Time
}

// Receiver is a real HTTP webhook receiver, closed in t.Cleanup: it
// records every request and answers ReceiverReply with the status its
// status function returns (200 when nil). Safe for concurrent use.
type Receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []Received
	status func() int
}

// NewReceiver starts a Receiver answering with status (200 when nil).
func NewReceiver(t testing.TB, status func() int) *Receiver {
	t.Helper()
	r := &Receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, Received{ID: req.Header.Get("webhook-id"), Timestamp: req.Header.Get("webhook-timestamp"),
			Signature: req.Header.Get("webhook-signature"), Body: body, At: time.Now()})
		st := http.StatusOK
		if r.status != nil {
			st = r.status()
		}
		r.mu.Unlock()
		w.WriteHeader(st)
		_, _ = io.WriteString(w, ReceiverReply)
	}))
	t.Cleanup(r.Close)
	return r
}

// Requests returns the requests received so far, in order.
func (r *Receiver) Requests() []Received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Received(nil), r.got...)
}

// IDs returns the webhook-id of each request received so far, in order.
func (r *Receiver) IDs() []string {
	var ids []string
	for _, q := range r.Requests() {
		ids = append(ids, q.ID)
	}
	return ids
}
