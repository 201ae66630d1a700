package envoyrls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"github.com/oasdiff/yaml"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// The typed configs the shipped files use, registered for Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// TestShippedEnvoyConfigs: every Envoy configuration in deploy/envoy is a
// valid bootstrap by Envoy's own API types and their validation rules,
// with no field Envoy would not know.
func TestShippedEnvoyConfigs(t *testing.T) {
	files, err := filepath.Glob("../../../deploy/envoy/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("deploy/envoy: %v %v, want the ratelimit and ext_authz configurations", files, err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			js, err := yaml.YAMLToJSON(raw)
			if err != nil {
				t.Fatalf("not YAML: %v", err)
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &b); err != nil {
				t.Fatalf("not an Envoy bootstrap: %v", err)
			}
			if err := validateDeep(&b); err != nil {
				t.Fatalf("invalid: %v", err)
			}
			for _, want := range []string{"x-tollgate-service-token", "use_remote_address: true"} {
				if !strings.Contains(string(raw), want) {
					t.Errorf("%s does not set %s", filepath.Base(path), want)
				}
			}
		})
	}
}

// validateDeep runs m's validation rules and those of every message
// packed in an Any inside it (the filters' typed configs), which
// ValidateAll alone does not open.
func validateDeep(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var err error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		each := func(msg protoreflect.Message) bool {
			inner := msg.Interface()
			if a, ok := inner.(*anypb.Any); ok {
				if inner, err = a.UnmarshalNew(); err != nil {
					return false
				}
			}
			err = validateDeep(inner)
			return err == nil
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				if !each(v.List().Get(i).Message()) {
					return false
				}
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool { return each(mv.Message()) })
			}
		default:
			return each(v.Message())
		}
		return err == nil
	})
	return err
}
