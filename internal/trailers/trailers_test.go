package trailers_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/idem-go/idem/internal/trailers"
)

// A handler declared X-Checksum in its Trailer header, sent its status and
// body, then set X-Checksum and, with http.TrailerPrefix, Grpc-Status: the
// headers an adapter copied at the status gain both, as trailers. A name
// declared but never set is not added.
func ExampleAdd() {
	live := http.Header{"Content-Type": {"application/grpc"}, "Trailer": {"X-Checksum, X-Unset"}}
	sent := live.Clone() // as the adapter copied them with the status
	live.Set("X-Checksum", "c1")
	live.Set(http.TrailerPrefix+"Grpc-Status", "0")

	trailers.Add(sent, live)
	for _, k := range slices.Sorted(maps.Keys(sent)) {
		fmt.Println(k, sent[k])
	}
	// Output:
	// Content-Type [application/grpc]
	// Trailer [X-Checksum, X-Unset]
	// Trailer:Grpc-Status [0]
	// Trailer:X-Checksum [c1]
}
