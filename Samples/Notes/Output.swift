import Foundation

/// An error the app reports in words: exit status 1, the message on standard error.
struct NotesError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Writes a line to standard output at once (the tests and the demo read it as it comes).
///
/// - Throws: ``NotesError`` when standard output cannot be written (a full disk, `/dev/full`, a
///   closed file): the command then ends with the message on standard error and exit status 1.
func say(_ line: String) throws(NotesError) {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
    } catch {
        throw NotesError("cannot write to standard output: \(describe(error))")
    }
}

/// Writes a line to standard error; a failure to write there has nowhere to be told, so it is
/// dropped (never a trap).
func complain(_ line: String) {
    try? FileHandle.standardError.write(contentsOf: Data((line + "\n").utf8))
}

/// A line a launch reports: data (records, what a command did) goes to standard output; status
/// (sync's progress and state, warnings) to standard error.
enum ReportLine: Equatable {
    case data(String)
    case status(String)

    /// Writes the line where it belongs.
    func print() throws(NotesError) {
        switch self {
        case .data(let line): try say(line)
        case .status(let line): complain(line)
        }
    }
}

/// An I/O error in words, with the errno's text when there is one.
private func describe(_ error: any Error) -> String {
    var posix = error as NSError
    if let underlying = posix.userInfo[NSUnderlyingErrorKey] as? NSError { posix = underlying }
    guard posix.domain == NSPOSIXErrorDomain else { return "\(error)" }
    return "\(String(cString: strerror(Int32(posix.code)))) (errno \(posix.code))"
}
