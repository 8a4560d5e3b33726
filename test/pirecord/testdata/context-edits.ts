// A pi extension that edits the context the way extensions do: when the
// model's answer says EDIT-ME, the turn_end boundary replaces that answer's
// content and inserts a context message of its own.
export default function (pi: any) {
	let done = false;
	pi.on("turn_end", (event: any) => {
		if (done || event.outcome !== "completed" || event.toolResults.length > 0) return;
		const text = (event.message?.content ?? []).map((b: any) => b.text ?? "").join("");
		if (!text.includes("EDIT-ME")) return;
		done = true;
		return {
			entries: [
				...event.entries,
				{ type: "context_edit", targetId: event.messageEntryId, replacement: { content: [{ type: "text", text: "(an answer the extension shortened)" }] } },
				{ type: "custom_message", customType: "reminder", content: "Remember: the launch is on Tuesday.", display: false },
			],
		};
	});
}
