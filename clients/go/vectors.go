package memevo

import (
	"encoding/binary"
	"fmt"
	"math"

	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

// EncodeVector packs float32 values as little-endian bytes, the wire form of every vector.
func EncodeVector(v []float32) []byte {
	if v == nil {
		return nil
	}
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// DecodeVector unpacks little-endian float32 bytes. An empty input gives an empty (nil) slice.
func DecodeVector(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("memevo: %d bytes is not a whole number of float32 values", len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// VectorOf decodes a memory's vector (present only when the call asked for vectors).
func VectorOf(m *memevov1.Memory) ([]float32, error) {
	return DecodeVector(m.GetVector())
}
