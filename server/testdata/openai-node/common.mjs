// Helpers shared by the client scripts: each runs against a lagc server
// whose base URL and model id are the first two arguments, checks what the
// official client makes of the answers, and prints a JSON summary.
import OpenAI from "openai";

export function client() {
  const [baseURL, model] = process.argv.slice(2);
  if (!baseURL || !model) {
    console.error("usage: node SCRIPT.mjs BASE_URL MODEL");
    process.exit(2);
  }
  return { openai: new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 }), model };
}

export function check(cond, what, got) {
  if (!cond) {
    throw new Error(`${what}: got ${JSON.stringify(got)}`);
  }
}

// collectChat reads a streamed chat completion into one message.
export async function collectChat(stream) {
  const out = { ids: new Set(), role: "", reasoning: "", content: "", finish: null, usage: null };
  for await (const chunk of stream) {
    out.ids.add(chunk.id);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.role += c.delta.role ?? "";
      out.reasoning += c.delta.reasoning_content ?? "";
      out.content += c.delta.content ?? "";
      if (c.finish_reason) out.finish = c.finish_reason;
    }
  }
  return out;
}

export function run(main) {
  main().then(
    (summary) => console.log(JSON.stringify(summary)),
    (err) => {
      console.error(err?.stack ?? err);
      process.exit(1);
    },
  );
}
