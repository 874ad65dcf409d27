import Foundation

/// One decoder of files that another device or process wrote, as the fuzzers and the corpus
/// replay drive it: decode the bytes; where that succeeds, encode again and check what must hold
/// for a round trip.
///
/// The libFuzzer executable (`make fuzz`, `Fuzz/Driver`) and the replay suite
/// (`FuzzCorpusReplayTests`, in `make test`) call the same ``run(_:url:)``, so an input that once
/// crashed a fuzzer is replayed through exactly the code it crashed.
package struct FuzzTarget: Sendable {
    /// The target's name: its corpus is `Fuzz/Corpus/<name>`, its crashes `Fuzz/Crashes/<name>`.
    package let name: String
    /// What it decodes, for people reading `make fuzz`'s output.
    package let summary: String
    private let body: @Sendable (Data, URL) throws(FuzzFinding) -> FuzzOutcome

    package init(
        _ name: String,
        _ summary: String,
        _ body: @escaping @Sendable (Data, URL) throws(FuzzFinding) -> FuzzOutcome
    ) {
        self.name = name
        self.summary = summary
        self.body = body
    }

    /// Decodes `data` as if it had been read from `url`.
    ///
    /// - Returns: whether the input decoded, or the typed error it was rejected with.
    /// - Throws: ``FuzzFinding`` when a property that must hold does not (a round trip that
    ///   changes the value, a decoder that accepts what it then cannot encode, an error of the
    ///   wrong type). A crash, a trap or a hang is a finding too, but the process ends with it.
    package func run(_ data: Data, url: URL) throws(FuzzFinding) -> FuzzOutcome {
        try body(data, url)
    }

    /// Every target, in the order `make fuzz` runs them.
    package static let all: [FuzzTarget] = [
        log, logScanner, payload, baseline, recordClocks, hybridClock, acknowledgement, appliedLogs,
        sentinel, containerIdentity, requests, jsonStore, plistStore, storeOpen,
    ]

    /// The target called `name`, if there is one.
    package static func named(_ name: String) -> FuzzTarget? { all.first { $0.name == name } }
}

/// What one input did.
package enum FuzzOutcome: Sendable {
    /// The input decoded (and every round-trip property held).
    case decoded
    /// The input was refused with `error`; `namedFile` is the file the decoder was told it read
    /// (an error from a decoder that knows its file must name it), `nil` for decoders of bytes
    /// that production code wraps in an error naming the file itself.
    case rejected(any Error, namedFile: URL?)
}

/// A property that must hold did not: a bug, like a crash.
package struct FuzzFinding: Error, CustomStringConvertible {
    /// The target that found it.
    package var target: String
    /// What went wrong.
    package var message: String

    package init(_ target: String, _ message: String) {
        self.target = target
        self.message = message
    }

    package var description: String { "\(target): \(message)" }
}

extension FuzzTarget {
    /// Checks `condition`, a property of a round trip.
    static func check(_ condition: Bool, _ target: String, _ message: @autoclosure () -> String) throws(FuzzFinding) {
        if !condition { throw FuzzFinding(target, message()) }
    }

    /// Runs `body`, turning any error it throws into a finding (for steps that must not fail
    /// on a value that decoded).
    static func must<T>(_ target: String, _ step: String, _ body: () throws -> T) throws(FuzzFinding) -> T {
        do {
            return try body()
        } catch {
            throw FuzzFinding(target, "\(step) failed on a value that decoded: \(error)")
        }
    }
}
