// Command webhook-sink is a webhook receiver for trying Tollgate out on
// one machine: it listens on a loopback address only, answers every
// delivery 200 and prints one line for it (when, the webhook-id, the
// event's type and tenant). `make run` starts it beside the servers, and
// the demo's webhook endpoints point at it (internal/demo), so that
// deliveries show in the console without anything leaving the machine.
// It does not verify signatures: it does not know the endpoints' secrets.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/internal/httpx"
)

// defaultAddr is where the demo's endpoints send (internal/demo's
// ReceiverURL).
const defaultAddr = "127.0.0.1:8082"

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "webhook-sink:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends or SIGINT/SIGTERM, printing a line per
// delivery to stdout. When ready is not nil it receives the address
// listened on.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("webhook-sink", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", defaultAddr, "loopback address to listen on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("-addr %s: %w", *addr, err)
	}
	if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %s: must be a loopback address (127.0.0.1 or [::1]): the sink is for this machine only", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: handleDelivery(stdout), ReadHeaderTimeout: 5 * time.Second}
	if ready != nil {
		ready <- ln.Addr().String()
	}
	fmt.Fprintf(stderr, "webhook-sink: listening on http://%s\n", ln.Addr())
	return httpx.Serve(ctx, srv, ln, 5*time.Second, slog.New(slog.NewTextHandler(stderr, nil)))
}

// handleDelivery answers every POST 200 and prints a line for it to out;
// other methods are a 405.
func handleDelivery(out io.Writer) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "webhook-sink takes POST only", http.StatusMethodNotAllowed)
			return
		}
		var ev struct {
			Type     string `json:"type"`
			TenantID string `json:"tenant_id"`
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(body, &ev)
		}
		if err != nil {
			ev.Type = "(not an event: " + err.Error() + ")"
		}
		tenant := ev.TenantID
		if tenant == "" {
			tenant = "-"
		}
		mu.Lock()
		fmt.Fprintf(out, "%s %s %s %s tenant=%s\n", time.Now().UTC().Format(time.RFC3339), r.URL.Path,
			r.Header.Get("webhook-id"), ev.Type, tenant)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "received by the demo webhook sink\n")
	})
}
