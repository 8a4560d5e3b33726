// Prints what pi-coding-agent itself resumes a session file with: the
// messages of buildSessionContext, after convertToLlm and pi-ai's
// transformMessages for the model it resumes with.
//
//   node context.mjs PI_DIR SESSION_FILE API [LEAF]
//
// LEAF, an entry id, resumes the path that ends there instead of the
// file's last entry.
// PI_DIR is test/pi/1, where `make pi-deps` installs pi 1.6.0. Output: one
// JSON object {model, context, transformed}.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [piDir, file, api, leaf] = process.argv.slice(2);
if (!piDir || !file || !api) throw new Error("usage: node context.mjs PI_DIR SESSION_FILE API");
const mod = (p) => import(pathToFileURL(join(piDir, "node_modules", "@earendil-works", p)).href);
const { SessionManager, buildSessionContext } = await mod("pi-coding-agent/dist/core/session-manager.js");
const { convertToLlm } = await mod("pi-coding-agent/dist/core/messages.js");
const { transformMessages } = await mod("pi-ai/dist/api/transform-messages.js");

const sm = SessionManager.open(file);
const ctx = leaf ? buildSessionContext(sm.getEntries(), leaf) : sm.buildSessionContext();
const model = { provider: ctx.model.provider, id: ctx.model.modelId, api, input: ["text", "image"] };
const context = convertToLlm(ctx.messages);
process.stdout.write(JSON.stringify({ model: ctx.model, context, transformed: transformMessages(context, model) }));
