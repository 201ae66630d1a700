package adminapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
)

// handlePage serves one page of a list: the page request from the query
// (?limit=…&cursor=…), then the filter that filter reads from the request,
// then a page of list. An error at any step is the answer.
func handlePage[F, T any](log *slog.Logger, filter func(r *http.Request) (F, error),
	list func(ctx context.Context, f F, pr page.Request) (page.Page[T], error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, err := page.FromQuery(r.URL.Query())
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		f, err := filter(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		pg, err := list(r.Context(), f, pr)
		writeResult(w, r, log, pg, err)
	})
}

// fromQuery is a filter for handlePage that parse reads from the
// request's query.
func fromQuery[F any](parse func(q url.Values) (F, error)) func(r *http.Request) (F, error) {
	return func(r *http.Request) (F, error) { return parse(r.URL.Query()) }
}

// writeResult answers err, or else v as JSON with 200 OK.
func writeResult(w http.ResponseWriter, r *http.Request, log *slog.Logger, v any, err error) {
	if err != nil {
		httpx.Error(w, r, log, err)
		return
	}
	httpx.JSON(w, r, log, http.StatusOK, v)
}

// handleSteps serves a request in two steps: read takes what the request
// names or holds, then do acts on it; respond writes do's result. An error
// at either step is the answer.
func handleSteps[P, T any](log *slog.Logger, read func(r *http.Request) (P, error),
	do func(r *http.Request, p P) (T, error), respond func(w http.ResponseWriter, r *http.Request, v T)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := read(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		v, err := do(r, p)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		respond(w, r, v)
	})
}

// handlePath serves a request about what its path names: parse reads
// that from the request (an error is the answer, such as 404 for an
// unknown tenant), then do's result is the answer, as JSON with status.
func handlePath[P, T any](log *slog.Logger, status int, parse func(r *http.Request) (P, error),
	do func(r *http.Request, p P) (T, error)) http.Handler {
	return handleSteps(log, parse, do, func(w http.ResponseWriter, r *http.Request, v T) { httpx.JSON(w, r, log, status, v) })
}

// noFilter is the filter of a list that has none.
func noFilter(*http.Request) (struct{}, error) { return struct{}{}, nil }

// decodeBody is httpx.DecodeBody with the admin API's MaxBody, refusing
// text Postgres cannot store (httpx.TextFields) and times outside the
// years 0000 to 9999 in UTC (httpx.TimeFields).
func decodeBody(r *http.Request, v any) error {
	if err := httpx.DecodeBody(r, MaxBody, v); err != nil {
		return err
	}
	return storableFields(v)
}

func storableFields(v any) error {
	if err := httpx.TextFields(v); err != nil {
		return err
	}
	return httpx.TimeFields(v)
}

// decodeValid is decodeBody, then the body's own validation when it has
// one (httpx.Decode).
func decodeValid(r *http.Request, v any) error {
	if err := httpx.Decode(r, MaxBody, v); err != nil {
		return err
	}
	return storableFields(v)
}

// handleBody serves a request with a JSON body: the body decoded into an
// In by decode, then apply; respond writes the result. An error at either
// step is the answer.
func handleBody[In, Out any](log *slog.Logger, decode func(r *http.Request, v any) error,
	apply func(r *http.Request, in In) (Out, error), respond func(w http.ResponseWriter, r *http.Request, v Out)) http.Handler {
	return handleSteps(log, func(r *http.Request) (In, error) {
		var in In
		err := decode(r, &in)
		return in, err
	}, apply, respond)
}

// handleChange serves a request whose body (decodeBody) change applies:
// the result as JSON with 200 OK.
func handleChange[In, Out any](log *slog.Logger, change func(r *http.Request, in In) (Out, error)) http.Handler {
	return handleBody(log, decodeBody, change, func(w http.ResponseWriter, r *http.Request, v Out) {
		httpx.JSON(w, r, log, http.StatusOK, v)
	})
}

// handleCreate serves a request that makes something from its body
// (decoded by decode): 201 Created with the result, and a Location header
// of /api/v1 followed by location(result), the new thing's path.
func handleCreate[In, Out any](log *slog.Logger, decode func(r *http.Request, v any) error,
	create func(r *http.Request, in In) (Out, error), location func(Out) string) http.Handler {
	return handleBody(log, decode, create, func(w http.ResponseWriter, r *http.Request, v Out) {
		w.Header().Set("Location", "/api/v1"+location(v))
		httpx.JSON(w, r, log, http.StatusCreated, v)
	})
}
