// Package modelinfo reads what the warden needs from a model's own files
// before any engine starts: where they are (a local directory or the
// Hugging Face cache), config.json's architectures, model type and context,
// and the chat template; and from those, the tool-call and reasoning
// parsers of vLLM that fit the model (docs/tools.md has the table).
//
// It never downloads: a model that is neither a local directory nor in the
// cache is known by its name alone.
package modelinfo
