package rls

import (
	"math/rand/v2"
	"testing"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestDecodeRequestIsProtos: decodeRequest decides every input as
// proto.Unmarshal does (unknown fields dropped): the same error or none,
// and the same message. Inputs: random requests as Envoy sends them, the
// same with every field's wire type, number and bytes disturbed,
// concatenations (a singular message field given twice is merged; a
// repeated one appends), truncations and invalid UTF-8.
func TestDecodeRequestIsProtos(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	const cases = 20_000
	var decoded, refused int
	for i := range cases {
		b := randomWire(rng)
		want := new(rlsv3.RateLimitRequest)
		wantErr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, want)
		got := new(rlsv3.RateLimitRequest)
		gotErr := decodeRequest(append([]byte(nil), b...), got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("case %d, % x: proto says %v, decodeRequest %v", i, b, wantErr, gotErr)
		}
		if wantErr != nil {
			refused++
			continue
		}
		decoded++
		if !proto.Equal(want, got) {
			t.Fatalf("case %d, % x:\nproto         %v\ndecodeRequest %v", i, b, want, got)
		}
	}
	t.Logf("%d inputs: %d decoded alike, %d refused by both", cases, decoded, refused)
	if decoded < cases/4 || refused < cases/20 {
		t.Fatalf("%d decoded, %d refused: the inputs do not cover both", decoded, refused)
	}
}

// randomWire is a request's bytes: a marshalled random request, then
// disturbed one way or another.
func randomWire(rng *rand.Rand) []byte {
	b, err := proto.Marshal(randomRequest(rng))
	if err != nil {
		panic(err)
	}
	switch rng.IntN(9) {
	case 0, 1:
		return b
	case 2: // a descriptor of two in one: its singular fields merged, its entries appended
		d1, _ := proto.Marshal(randomDescriptor(rng))
		d2, _ := proto.Marshal(randomDescriptor(rng))
		return protowire.AppendBytes(protowire.AppendTag(b, 2, protowire.BytesType), append(d1, d2...))
	case 3: // two messages in one: merged
		c, _ := proto.Marshal(randomRequest(rng))
		return append(b, c...)
	case 4: // truncated
		return b[:rng.IntN(len(b)+1)]
	case 5: // a byte changed
		if len(b) > 0 {
			b[rng.IntN(len(b))] = byte(rng.IntN(256))
		}
		return b
	case 6: // invalid UTF-8 in a string
		for i := range b {
			if b[i] == 'x' {
				b[i] = 0xff
				break
			}
		}
		return b
	}
	// A field of any number and wire type inserted at the start.
	var f []byte
	num := protowire.Number(1 + rng.IntN(6))
	switch typ := []protowire.Type{protowire.VarintType, protowire.BytesType, protowire.Fixed32Type, protowire.Fixed64Type}[rng.IntN(4)]; typ {
	case protowire.VarintType:
		f = protowire.AppendVarint(protowire.AppendTag(f, num, typ), rng.Uint64())
	case protowire.BytesType:
		inner, _ := proto.Marshal(randomDescriptor(rng))
		f = protowire.AppendBytes(protowire.AppendTag(f, num, typ), inner)
	case protowire.Fixed32Type:
		f = protowire.AppendFixed32(protowire.AppendTag(f, num, typ), rng.Uint32())
	default:
		f = protowire.AppendFixed64(protowire.AppendTag(f, num, typ), rng.Uint64())
	}
	return append(f, b...)
}

func randomRequest(rng *rand.Rand) *rlsv3.RateLimitRequest {
	r := &rlsv3.RateLimitRequest{Domain: randomString(rng), HitsAddend: uint32(rng.IntN(3))}
	for range rng.IntN(5) {
		r.Descriptors = append(r.Descriptors, randomDescriptor(rng))
	}
	return r
}

func randomDescriptor(rng *rand.Rand) *extrlsv3.RateLimitDescriptor {
	d := &extrlsv3.RateLimitDescriptor{IsNegativeHits: rng.IntN(4) == 0}
	for range rng.IntN(4) {
		d.Entries = append(d.Entries, &extrlsv3.RateLimitDescriptor_Entry{Key: randomString(rng), Value: randomString(rng)})
	}
	if rng.IntN(3) == 0 {
		d.Limit = &extrlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rng.Uint32N(100), Unit: typev3.RateLimitUnit(rng.IntN(8))}
		if rng.IntN(2) == 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(rng.Uint32N(10))
		}
	}
	if rng.IntN(3) == 0 {
		d.HitsAddend = wrapperspb.UInt64(rng.Uint64N(10))
	}
	return d
}

func randomString(rng *rand.Rand) string {
	return []string{"", "x", "user", "tenant", "remote_address", "198.18.0.1", "héllo", "xx"}[rng.IntN(8)]
}

// BenchmarkDecodeRequest: a call of four descriptors as Envoy sends it,
// decoded by package proto and by decodeRequest.
func BenchmarkDecodeRequest(b *testing.B) {
	req := &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*extrlsv3.RateLimitDescriptor{
		{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.18.3.7"}}},
		{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: "t37"}}},
		{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u3701"}}},
		{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "search"}, {Key: "user", Value: "u3701"}}},
	}}
	wire, err := proto.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(wire, new(rlsv3.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decodeRequest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := decodeRequest(append([]byte(nil), wire...), new(rlsv3.RateLimitRequest)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
