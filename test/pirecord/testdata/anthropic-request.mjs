// Builds, with pi-ai 1.x's own anthropic-messages provider, the messages of
// the request it would send a model with a conversation, read as JSON from
// stdin: what a host resuming from a stored transcript sends. The request
// is never sent: pi-ai's onPayload hook receives the built params and stops
// the stream.
//
//   stdin:  {"model": <pi-ai Model>, "messages": [<pi-ai Message>, ...]}
//   stdout: {"messages": [<request message>, ...]}
//
// Evaluate it (node --input-type=module --eval) with pi 1.x's node in the
// directory pi-ai is installed in (test/pi/1), which it imports from.
import { readFileSync } from "node:fs";
import { stream } from "@earendil-works/pi-ai/api/anthropic-messages";

const input = JSON.parse(readFileSync(0, "utf8"));
const captured = new Error("request captured");
let params;
let failure;
const events = stream(input.model, { messages: input.messages }, {
	apiKey: "fake-key",
	onPayload: (p) => {
		params = p;
		throw captured;
	},
});
for await (const event of events) {
	if (event.type === "error" && event.error.errorMessage !== captured.message) failure = event.error.errorMessage;
}
if (!params || failure) throw new Error(failure ?? "no request was built");
process.stdout.write(JSON.stringify({ messages: params.messages }));
