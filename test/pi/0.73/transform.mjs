// Runs pi-ai's own transformMessages — the pass every pi-ai provider makes
// over a conversation before it builds a request — on conversations read as
// JSON from stdin, and writes what it returns as JSON to stdout:
//
//   stdin:  {"targets": [{"provider": "anthropic", "model": "claude-sonnet-4-5"}, ...],
//            "conversations": [[<pi-ai Message>, ...], ...]}
//   stdout: {"targets": [{"provider", "model", "api", "input"}, ...],
//            "results": [[[<Message>, ...] per target] per conversation]}
//
// turnlog's differential test (internal/replay/piai_diff_test.go) compares
// the results with turnlog's replay of the same conversations.
import { readFileSync } from "node:fs";
import { getModel } from "@mariozechner/pi-ai";
// transformMessages is not exported from the package's public entry (nor
// from any subpath in its "exports" map), so it is imported by file path
// from the installed dist.
import { transformMessages } from "./node_modules/@mariozechner/pi-ai/dist/providers/transform-messages.js";

const input = JSON.parse(readFileSync(0, "utf8"));
const models = input.targets.map((t) => {
	const model = getModel(t.provider, t.model);
	if (!model) {
		throw new Error(`pi-ai has no model ${t.provider}/${t.model}`);
	}
	return model;
});
// No tool-call id normaliser: each provider passes its own, which rewrites
// ids for its request format; that is request building, not replay.
const results = input.conversations.map((messages) => models.map((model) => transformMessages(messages, model)));
process.stdout.write(
	JSON.stringify({
		targets: models.map((m) => ({ provider: m.provider, model: m.id, api: m.api, input: m.input })),
		results,
	}),
);
