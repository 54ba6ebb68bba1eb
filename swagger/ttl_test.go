package swagger_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// The documented header says how long a key is remembered and which header
// marks a replay, both from the Engine's configuration.
func TestTTLAndReplayHeaderDocumented(t *testing.T) {
	eng, err := core.New(core.Config{ResponseTTL: 72 * time.Hour, ReplayHeader: "Idempotent-Replayed"})
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(`{"openapi": "3.0.3", "paths": {"/orders": {"post": {"responses": {"201": {"description": "Created"}}}}}}`)
	out, err := swagger.Inject(doc, swagger.OptionsFor(eng.Config()))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Paths map[string]map[string]struct {
			Parameters []map[string]any
			Responses  map[string]struct{ Headers map[string]any }
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	op := got.Paths["/orders"]["post"]
	p := op.Parameters[0]
	if p["x-idempotency-ttl-seconds"] != float64(72*3600) || !strings.Contains(p["description"].(string), "remembered for 3 days") {
		t.Fatalf("key parameter %v", p)
	}
	if !strings.Contains(p["description"].(string), "Idempotent-Replayed: true") || op.Responses["201"].Headers["Idempotent-Replayed"] == nil {
		t.Fatalf("replay header not documented as Idempotent-Replayed: %v, %v", p["description"], op.Responses["201"].Headers)
	}
}
