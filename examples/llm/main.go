// Command llm is a small "LLM-style" service: POST /v1/complete streams a
// made-up completion word by word, and its cost is the tokens it really
// produced, known only when the stream ends. The middleware holds the
// caller's max_tokens (the estimate) before the handler runs, and settles
// the hold at the tokens produced once the body has ended; a failed
// generation (a 5xx) is refunded.
//
//	TOLLGATE_URL=http://127.0.0.1:8080 TOLLGATE_SERVICE_TOKEN=<token> go run ./examples/llm
//	curl -N localhost:8091/v1/complete?max_tokens=50 -X POST -H 'Authorization: Bearer <API key>' -d 'tell me a story'
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate/tollgate/client"
)

func main() {
	if err := run(context.Background(), os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "llm:", err)
		os.Exit(1)
	}
}

// run serves until SIGINT or SIGTERM. Settings: TOLLGATE_URL (the check
// API), TOLLGATE_SERVICE_TOKEN, and ADDR (default :8091).
func run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	for _, name := range []string{"TOLLGATE_URL", "TOLLGATE_SERVICE_TOKEN"} {
		if getenv(name) == "" {
			return fmt.Errorf("%s is not set", name)
		}
	}
	tg, err := client.New(getenv("TOLLGATE_URL"), getenv("TOLLGATE_SERVICE_TOKEN"), client.Options{})
	if err != nil {
		return fmt.Errorf("TOLLGATE_URL: %w", err)
	}
	srv := &http.Server{Addr: cmp.Or(getenv("ADDR"), ":8091"), Handler: routes(tg, 20*time.Millisecond), ReadHeaderTimeout: 5 * time.Second}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Fprintf(stderr, "llm: listening on %s, checking with %s\n", srv.Addr, getenv("TOLLGATE_URL"))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// defaultMaxTokens is the estimate of a request that names none.
const defaultMaxTokens = 256

// maxTokens is the most tokens a request may produce: its estimate.
func maxTokens(r *http.Request) int64 {
	n, err := strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
	if err != nil || n <= 0 || n > 4096 {
		return defaultMaxTokens
	}
	return n
}

// routes is the service behind the middleware: every completion holds its
// max_tokens and is settled at the tokens it streamed.
func routes(tg *client.Client, perToken time.Duration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/complete", complete(perToken))
	return tg.Middleware(client.MiddlewareOptions{
		Mux:      mux,
		Cost:     maxTokens,
		Hold:     func(*http.Request) bool { return true },
		RefundOn: []string{"5xx", "timeout"},
	})(mux)
}

// complete streams a completion of the prompt, one word (token) every
// perToken, stopping at max_tokens or when the caller goes away, and
// reports the tokens it produced.
func complete(perToken time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		prompt, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		words := strings.Fields(string(prompt))
		if len(words) == 0 {
			words = []string{"once", "upon", "a", "time"}
		}
		limit := maxTokens(r)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		rc := http.NewResponseController(w)
		var produced int64
		defer func() { client.ReportCost(r.Context(), produced) }()
		// A made-up model: it echoes the prompt back until it has said
		// one word per prompt word, twice over, or reached the limit.
		for produced < limit && produced < int64(2*len(words)) {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(perToken):
			}
			if _, err := io.WriteString(w, words[produced%int64(len(words))]+" "); err != nil {
				return
			}
			_ = rc.Flush()
			produced++
		}
		_, _ = io.WriteString(w, "\n")
	}
}
