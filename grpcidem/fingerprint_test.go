package grpcidem_test

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idem-go/idem/grpcidem"
)

// withUnknown returns m with an unknown varint field 99 of value v.
func withUnknown[M proto.Message](m M, v uint64) M {
	m.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), v))
	return m
}

// TestFingerprintUnknownFields checks that unknown fields, wherever they
// are in the message (a map's value, a list's element, a field's message),
// are not part of the fingerprint, and that known fields still are.
func TestFingerprintUnknownFields(t *testing.T) {
	t.Parallel()
	inStruct := func(v *structpb.Value) proto.Message {
		return &structpb.Struct{Fields: map[string]*structpb.Value{"a": v}}
	}
	inList := func(v *structpb.Value) proto.Message {
		return structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNullValue(), v}})
	}
	inField := func(v *structpb.Value) proto.Message {
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"l": inList(v).(*structpb.Value)}})
	}
	for name, wrap := range map[string]func(*structpb.Value) proto.Message{
		"top": func(v *structpb.Value) proto.Message { return v }, "map value": inStruct, "list element": inList, "field": inField,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fp := func(m proto.Message) [32]byte {
				t.Helper()
				sum, err := grpcidem.Fingerprint("/s/M", m)
				if err != nil {
					t.Fatal(err)
				}
				return sum
			}
			plain := wrap(structpb.NewNumberValue(1))
			sent := wrap(withUnknown(structpb.NewNumberValue(1), 7))
			if fp(plain) != fp(sent) || fp(sent) != fp(wrap(withUnknown(structpb.NewNumberValue(1), 8))) {
				t.Fatal("unknown fields changed the fingerprint")
			}
			if fp(sent) == fp(wrap(withUnknown(structpb.NewNumberValue(2), 7))) {
				t.Fatal("two messages of other known fields have one fingerprint")
			}
			if !proto.Equal(sent, wrap(withUnknown(structpb.NewNumberValue(1), 7))) {
				t.Fatal("the fingerprint changed the request")
			}
		})
	}
}
