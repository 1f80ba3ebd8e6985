// defines: printable() (text from outside made safe to print: what a file, a folder name or a
// command line said, shown, never obeyed by the terminal), printable_message() (the same for a
// whole message of cutrain's, keeping the line breaks it made) and is_printable_message().
//
// Why here, on the ground floor: every floor quotes names from outside in its messages (data/'s
// readers, nn/'s model descriptions, train/'s checkpoints and configuration), and the one
// function must be includable from all of them.
//
// What printable() shows, and how (one visible form, so a reader learns it once):
//   - bytes that are not valid UTF-8 (a stray continuation byte, a sequence cut short, an
//     overlong form, a surrogate), one escape a byte:            "\x92"
//   - C0 controls U+0000-U+001F (NUL, BEL, BS, TAB, LF, CR, ESC, ...) and DEL U+007F: "\x1b"
//   - C1 controls U+0080-U+009F (valid UTF-8, but terminals obey some of them):    "\u009b"
//   - the Unicode bidirectional controls, which reorder what follows them on screen (a name
//     could read "gpj.exe" as "exe.jpg"): U+061C, U+200E, U+200F, U+202A-U+202E,
//     U+2066-U+2069; and the line and paragraph separators U+2028, U+2029:          "\u202e"
// Everything else, valid UTF-8 (accents, CJK, emoji, U+FFFD), comes back unchanged. Hex digits
// are lowercase. A backslash is kept as it is (paths and names rarely hold one, and doubling it
// would make them harder to read), so a name that holds the four characters "\x1b" prints as
// one that held ESC: the output is for people, never parsed back.
//
// The output is valid UTF-8 free of all the above, and printable(printable(s)) == printable(s),
// so a message built from already printable parts may be passed through it again safely.
#pragma once
#include <string>
#include <string_view>

namespace cutrain {

// `text` with every invalid byte, control character and bidi control shown as an escape
// (above). "conv1.w.\x92omentum" (byte 0x92) -> "conv1.w.\\x92omentum"; "a\tb" -> "a\\x09b".
std::string printable(std::string_view text);

// A message of cutrain's that may quote outside text: printable() on each line, the '\n's
// between lines kept. Only for the final backstop where messages are printed (train/cli/cli.cpp):
// the readers have already made what they quote printable, so a '\n' left in a message is one
// cutrain put there; every other control (a '\r', an ESC) is escaped.
std::string printable_message(std::string_view message);

// Whether `message` is as cutrain's messages must be: nothing for printable_message to change,
// and every line break one cutrain made. cutrain breaks a message only to list its problems,
// each on a line of its own indented by two spaces ("list.txt: 2 malformed lines:\n  ..."),
// so a '\n' not followed by "  " came from outside. (printable_message does not enforce the
// indent: it keeps a message whole rather than guess.) fuzz/feed.h checks every refusal's
// message with it.
bool is_printable_message(std::string_view message);

}  // namespace cutrain
