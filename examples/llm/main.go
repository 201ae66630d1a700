// Command llm is a small "LLM-style" service: POST /v1/complete streams a
// made-up completion word by word, and its cost is the tokens it really
// produced, known only when the stream ends. The middleware holds the
// caller's max_tokens (the estimate) before the handler runs, and settles
// the hold at the tokens produced once the body has ended; a failed
// generation (a 5xx) is refunded, and a caller that hangs up pays for the
// tokens streamed to it until then.
//
//	TOLLGATE_URL=http://127.0.0.1:8080 TOLLGATE_SERVICE_TOKEN=<token> go run ./examples/llm
//	curl -N localhost:8091/v1/complete?max_tokens=50 -X POST -H 'Authorization: Bearer <API key>' -d 'tell me a story'
package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/examples/internal/serve"
)

// main serves until SIGINT or SIGTERM. Settings: TOLLGATE_URL (the check
// API), TOLLGATE_SERVICE_TOKEN, and ADDR (default :8091).
func main() {
	serve.Main("llm", ":8091", func(tg *client.Client) http.Handler { return routes(tg, 20*time.Millisecond) })
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
