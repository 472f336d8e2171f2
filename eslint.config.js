// ESLint (flat config) for the dashboard's ES modules and their unit tests: eslint:recommended
// plus rules that catch real bugs; no style rules (the code's layout is reviewed by people).
import js from "@eslint/js";
import globals from "globals";

// Server data is only ever written as text (main.js): these would parse it as HTML.
const NO_HTML_SINKS = [
  "innerHTML", "outerHTML",
].map((property) => ({
  selector: `AssignmentExpression > MemberExpression.left[property.name='${property}']`,
  message: `${property} parses its value as HTML: build elements with dom.js (h, put) instead.`,
})).concat([
  { selector: "CallExpression[callee.property.name='insertAdjacentHTML']",
    message: "insertAdjacentHTML parses HTML: build elements with dom.js instead." },
  { selector: "CallExpression[callee.object.name='document'][callee.property.name='write']",
    message: "document.write parses HTML: build elements with dom.js instead." },
]);

const BUG_RULES = {
  "array-callback-return": "error",
  "default-param-last": "error",
  eqeqeq: ["error", "smart"],
  "no-constructor-return": "error",
  "no-eval": "error",
  "no-implied-eval": "error",
  "no-implicit-coercion": ["error", { allow: ["!!"] }],
  "no-implicit-globals": "error",
  "no-new-func": "error",
  "no-new-wrappers": "error",
  "no-promise-executor-return": "error",
  "no-restricted-syntax": ["error", ...NO_HTML_SINKS],
  "no-self-compare": "error",
  "no-shadow": ["error", { builtinGlobals: false, hoist: "functions" }],
  "no-template-curly-in-string": "error",
  "no-throw-literal": "error",
  "no-unmodified-loop-condition": "error",
  "no-unreachable-loop": "error",
  "no-unused-vars": ["error", { args: "after-used", argsIgnorePattern: "^_", caughtErrors: "none" }],
  "no-use-before-define": ["error", { functions: false, classes: true, variables: false }],
  "no-useless-concat": "error",
  "no-var": "error",
  "prefer-const": "error",
  radix: "error",
};

export default [
  { ignores: ["node_modules/**"] },
  js.configs.recommended,
  {
    files: ["src/agentcanvas/api/web/js/**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.browser },
    rules: BUG_RULES,
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
    rules: BUG_RULES,
  },
];
