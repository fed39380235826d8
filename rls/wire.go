package rls

import (
	"errors"
	"unicode/utf8"
	"unsafe"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// wireCodec is the codec of the gRPC server Serve builds: grpc's proto
// codec, except that a RateLimitRequest is decoded by decodeRequest, which
// builds the same message as proto.Unmarshal with a few allocations per
// call instead of one per descriptor, entry and string (the request's
// strings share one copy of its bytes). It is the server's only
// message-specific work besides deciding, and the allocations were most
// of the garbage a call left.
type wireCodec struct{ proto encoding.CodecV2 }

func newWireCodec() wireCodec { return wireCodec{encoding.GetCodecV2(proto.Name)} }

// Name is proto's: the codec serves the same content subtype.
func (c wireCodec) Name() string { return c.proto.Name() }

// Marshal is proto's.
func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }

// Unmarshal decodes a RateLimitRequest with decodeRequest, and anything
// else with proto's codec.
func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rlsv3.RateLimitRequest); ok {
		return decodeRequest(data.Materialize(), r)
	}
	return c.proto.Unmarshal(data, v)
}

// errInvalidUTF8 is proto3's refusal of a string field that is not UTF-8.
var errInvalidUTF8 = errors.New("rls: string field contains invalid UTF-8")

// decodeRequest decodes b into r (reset first) as proto.Unmarshal would,
// except that unknown fields are dropped (the server reads none) and r's
// strings point into b, which the caller must not change afterwards.
// Repeated message fields append one message per occurrence; a singular
// message field that occurs more than once is merged; a known field with
// an unexpected wire type is an unknown field, as in package proto.
func decodeRequest(b []byte, r *rlsv3.RateLimitRequest) error {
	r.Reset()
	nd, ne, err := countRequest(b)
	if err != nil {
		return err
	}
	var (
		descs   []extrlsv3.RateLimitDescriptor
		entries []extrlsv3.RateLimitDescriptor_Entry
		eptrs   []*extrlsv3.RateLimitDescriptor_Entry
	)
	if nd > 0 {
		descs = make([]extrlsv3.RateLimitDescriptor, nd)
		r.Descriptors = make([]*extrlsv3.RateLimitDescriptor, 0, nd)
	}
	if ne > 0 {
		entries = make([]extrlsv3.RateLimitDescriptor_Entry, ne)
		eptrs = make([]*extrlsv3.RateLimitDescriptor_Entry, ne)
		for i := range entries {
			eptrs[i] = &entries[i]
		}
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:] // n > 0: countRequest parsed every tag
		switch {
		case num == 1 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			if r.Domain, err = wireString(v); err != nil {
				return err
			}
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			b = b[n:]
			d := &descs[len(r.Descriptors)]
			k, err := decodeDescriptor(v, d, eptrs)
			if err != nil {
				return err
			}
			d.Entries, eptrs = eptrs[:k:k], eptrs[k:]
			r.Descriptors = append(r.Descriptors, d)
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			b = b[n:]
			r.HitsAddend = uint32(v)
		default:
			b = b[protowire.ConsumeFieldValue(num, typ, b):]
		}
	}
	return nil
}

// countRequest checks the framing of a request's fields and of its
// descriptors' and returns how many descriptors and entries it holds.
func countRequest(b []byte) (descs, entries int, err error) {
	err = eachField(b, func(f field) error {
		if f.num == 2 && f.typ == protowire.BytesType {
			descs++
			return eachField(f.b, func(f field) error {
				if f.num == 1 && f.typ == protowire.BytesType {
					entries++
				}
				return nil
			})
		}
		return nil
	})
	return descs, entries, err
}

// field is one field of a message: its number and wire type, and its
// bytes (length-delimited) or value (varint).
type field struct {
	num protowire.Number
	typ protowire.Type
	b   []byte
	x   uint64
}

// eachField calls f with every field of the message b. It returns the
// first framing error, or f's.
func eachField(b []byte, f func(field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		fd := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			fd.b, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			fd.x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(fd); err != nil {
			return err
		}
	}
	return nil
}

// decodeDescriptor decodes a descriptor whose framing countRequest
// checked into d, but its entries, which it decodes in order into those
// of entries (countRequest made room for all of them), and returns how
// many it used.
func decodeDescriptor(b []byte, d *extrlsv3.RateLimitDescriptor, entries []*extrlsv3.RateLimitDescriptor_Entry) (int, error) {
	next := 0
	err := eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			next++
			return decodeEntry(f.b, entries[next-1])
		case f.num == 2 && f.typ == protowire.BytesType:
			if d.Limit == nil {
				d.Limit = new(extrlsv3.RateLimitDescriptor_RateLimitOverride)
			}
			return decodeOverride(f.b, d.Limit)
		case f.num == 3 && f.typ == protowire.BytesType:
			if d.HitsAddend == nil {
				d.HitsAddend = new(wrapperspb.UInt64Value)
			}
			return eachField(f.b, func(f field) error {
				if f.num == 1 && f.typ == protowire.VarintType {
					d.HitsAddend.Value = f.x
				}
				return nil
			})
		case f.num == 4 && f.typ == protowire.VarintType:
			d.IsNegativeHits = f.x != 0
		}
		return nil
	})
	return next, err
}

func decodeEntry(b []byte, e *extrlsv3.RateLimitDescriptor_Entry) error {
	return eachField(b, func(f field) error {
		var err error
		switch {
		case f.num == 1 && f.typ == protowire.BytesType:
			e.Key, err = wireString(f.b)
		case f.num == 2 && f.typ == protowire.BytesType:
			e.Value, err = wireString(f.b)
		}
		return err
	})
}

func decodeOverride(b []byte, o *extrlsv3.RateLimitDescriptor_RateLimitOverride) error {
	return eachField(b, func(f field) error {
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			o.RequestsPerUnit = uint32(f.x)
		case f.num == 2 && f.typ == protowire.VarintType:
			o.Unit = typev3.RateLimitUnit(int32(f.x))
		case f.num == 3 && f.typ == protowire.BytesType:
			if o.UnitMultiplier == nil {
				o.UnitMultiplier = new(wrapperspb.UInt32Value)
			}
			return eachField(f.b, func(f field) error {
				if f.num == 1 && f.typ == protowire.VarintType {
					o.UnitMultiplier.Value = uint32(f.x)
				}
				return nil
			})
		}
		return nil
	})
}

// wireString is v as a string sharing its bytes, if it is UTF-8.
func wireString(v []byte) (string, error) {
	if len(v) == 0 {
		return "", nil
	}
	if !utf8.Valid(v) {
		return "", errInvalidUTF8
	}
	return unsafe.String(&v[0], len(v)), nil
}
