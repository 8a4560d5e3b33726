// Package shardpolicy is the shard config/shards' admission policy gives a
// Session or SessionFork, computed again in Go, so that tests can check
// the labels the API server sets and name objects for the shards they want.
package shardpolicy

import "strings"

// alphabet is the policy's: a character's place in it, plus one, is what
// the hash takes of the character (0 for one outside it).
const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-./"

// Hash is the hash the policy computes in CEL of key: each character's
// place in the alphabet, plus 64 times its position, through a
// multiplicative hash and a step of a linear congruential generator,
// summed.
func Hash(key string) int64 {
	var sum int64
	for i := range len(key) {
		x := int64(strings.IndexByte(alphabet, key[i])) + 1 + 64*int64(i)
		sum += ((x*2654435761+97)%4294967291%2147483647*1103515245 + 12345) % 2147483648 / 65536
	}
	return sum
}

// Shard is the shard among shards (the ConfigMap turnlog-shards' list,
// in order) the policy gives the object key: "NAMESPACE/NAME" with `by:
// name`, the namespace alone with `by: namespace`. A namespace labelled
// turnlog.dev/shard overrides it.
func Shard(key string, shards []string) string {
	return shards[Hash(key)%int64(len(shards))]
}
