// Package trailers copies a handler's trailers into the headers an adapter
// stores, for core's capture writer and ginidem's.
package trailers

import (
	"net/http"
	"strings"
)

// Add adds to sent, the headers as sent with the status, the trailers that
// the handler set in live, its writer's header map, by the time it
// returned, as net/http sends them then: the names that sent's Trailer
// header declared, and the keys with http.TrailerPrefix (connect-go's gRPC
// protocol sends Grpc-Status so). They are added as "Trailer:name", which
// a replay sends as a trailer again.
func Add(sent, live http.Header) {
	for _, v := range sent["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if values, ok := live[name]; ok && name != "" {
				sent[http.TrailerPrefix+name] = values
			}
		}
	}
	for k, v := range live {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			sent[k] = v
		}
	}
}
