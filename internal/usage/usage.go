// Package usage reads the token usage that engines report in their answers,
// in the conventions vLLM uses per API. The proxy's tap, the bench and the
// tests share it, so that a convention (such as what Anthropic's
// input_tokens counts) is decided in one place.
package usage

import "github.com/tidwall/gjson"

// Anthropic is what an Anthropic Messages usage object says: the whole
// prompt, the part of it read from the prefix cache, and the output.
type Anthropic struct {
	Prompt, Cached, Output          uint64
	HasPrompt, HasCached, HasOutput bool
}

// ParseAnthropic reads a usage object of a Messages response, of the
// message in message_start or of message_delta.
//
// Anthropic's API, and vLLM's Messages endpoint since it reports cache
// writes (seen on 0.32.0: vllm/entrypoints/anthropic/serving.py
// _build_anthropic_usage), count input_tokens without the cache:
// prompt = input_tokens + cache_read_input_tokens + cache_creation_input_tokens.
// Where cache_creation_input_tokens is absent, a cache read larger than
// input_tokens can only mean that convention too; otherwise input_tokens is
// taken as the whole prompt, as older vLLM releases reported it. The
// message_start of a vLLM stream carries the whole prompt and no cache
// fields; its message_delta carries the split.
func ParseAnthropic(u gjson.Result) Anthropic {
	var a Anthropic
	in, read, create := u.Get("input_tokens"), u.Get("cache_read_input_tokens"), u.Get("cache_creation_input_tokens")
	if in.Exists() {
		a.Prompt, a.HasPrompt = in.Uint(), true
		switch {
		case create.Exists():
			a.Prompt += read.Uint() + create.Uint()
		case read.Uint() > a.Prompt:
			a.Prompt += read.Uint()
		}
	}
	if read.Exists() {
		a.Cached, a.HasCached = read.Uint(), true
	}
	if out := u.Get("output_tokens"); out.Exists() {
		a.Output, a.HasOutput = out.Uint(), true
	}
	return a
}
