package main

import (
	"errors"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The load generator sends calls marshalled once and reads only the
// overall_code of each answer, so that the client's own work, which is
// the same for every contender, takes as little of the machine's two cores
// as it can.

// shouldRateLimit is the full name of the method under load.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rawRequest is a RateLimitRequest in its wire form.
type rawRequest struct{ b []byte }

// rawResponse is what the client keeps of a RateLimitResponse.
type rawResponse struct{ code rlsv3.RateLimitResponse_Code }

// rawCodec sends rawRequest bytes as they are and decodes overall_code
// (field 1) of the answer. Its name is "proto": on the wire it is the
// protobuf codec.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*rawRequest)
	if !ok {
		return nil, errors.New("rawCodec: not a *rawRequest")
	}
	return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rawResponse)
	if !ok {
		return errors.New("rawCodec: not a *rawResponse")
	}
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	r.code = rlsv3.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			r.code = rlsv3.RateLimitResponse_Code(v)
			return nil
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

// marshalAll returns the wire form of every request.
func marshalAll(reqs []*rlsv3.RateLimitRequest) ([]rawRequest, error) {
	out := make([]rawRequest, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			return nil, err
		}
		out[i] = rawRequest{b: b}
	}
	return out, nil
}
