package memevo_test

import (
	"reflect"
	"testing"

	memevo "github.com/memevo/memevo/clients/go"
	memevov1 "github.com/memevo/memevo/clients/go/gen/memevo/v1"
)

// TestEveryRPCHasAMethod keeps the README's "every RPC has a method" true when the proto grows.
func TestEveryRPCHasAMethod(t *testing.T) {
	// RPCs whose methods are named otherwise.
	renamed := map[string][]string{"GetStats": {"Stats"}, "History": {"HistoryOfFact", "HistoryOfMemory"}}
	client := reflect.TypeOf(&memevo.Client{})
	methods := memevov1.File_memevo_v1_memory_service_proto.Services().ByName("MemoryService").Methods()
	for i := range methods.Len() {
		rpc := string(methods.Get(i).Name())
		names, ok := renamed[rpc]
		if !ok {
			names = []string{rpc}
		}
		for _, name := range names {
			if _, ok := client.MethodByName(name); !ok {
				t.Errorf("RPC %s has no method Client.%s", rpc, name)
			}
		}
	}
}
