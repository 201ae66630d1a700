package quota_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/apispec"
)

// requireDocumented fails unless every event of tenantID in the outbox
// is, as delivered, what openapi.yaml's webhooks: section describes for
// its type (its request body's schema, OpenAPI 3.1 / JSON Schema 2020-12);
// it returns how many it checked.
func requireDocumented(t *testing.T, db *pgxpool.Pool, tenantID string) int {
	t.Helper()
	doc := apispec.Load(t, "../../openapi.yaml")
	list, err := events.NewStore(db).Events(context.Background(), tenantID, "", page.First(page.MaxLimit))
	testenv.Must(t, err)
	for _, ev := range list.Items {
		hook := doc.Webhooks[ev.Type]
		if hook == nil || hook.Post == nil || hook.Post.RequestBody == nil {
			t.Errorf("%s is not described under webhooks: in openapi.yaml", ev.Type)
			continue
		}
		body, err := json.Marshal(ev)
		testenv.Must(t, err)
		var v any
		testenv.Must(t, json.Unmarshal(body, &v))
		schema := hook.Post.RequestBody.Value.Content.Get("application/json").Schema.Value
		if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			t.Errorf("%s %s is not what openapi.yaml describes: %v\n%s", ev.Type, ev.ID, err, body)
		}
	}
	return len(list.Items)
}
