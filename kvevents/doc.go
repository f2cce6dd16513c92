// Package kvevents speaks vLLM's KV-cache event wire: decode and encode of the msgpack
// payloads, a publisher (the simulator's, binding or connecting exactly as vLLM's
// ZmqEventPublisher does) and a subscriber (the router's) that heals gaps through vLLM's
// replay endpoint.
//
// The wire: ZMQ PUB/SUB messages of three frames [topic, sequence as 8-byte big-endian,
// payload], the payload a msgpack array [ts, events, data_parallel_rank] (the rank omitted
// when unset). vLLM 0.32 sends each event as a msgpack map whose "type" names the class
// (BlockStored, BlockRemoved, AllBlocksCleared); older releases sent positional arrays
// whose first element is that name. Decode reads both; Encode writes the 0.32 form byte for
// byte as msgspec does (testdata holds payloads written by vLLM's own classes).
//
// Replay: a DEALER sends ["", start 8-byte BE] to the engine's ROUTER, which answers one
// ["", topic, seq, payload] per buffered batch with seq >= start, then ["", "", -1, ""].
//
// The events carry token ids, that is the prompts' text: keep endpoints on loopback or on
// an ipc:// socket in a directory only the warden's user can open (docs/kv-events.md).
package kvevents
