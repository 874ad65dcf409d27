import ConcordTestSupport
import Foundation
import Testing

/// The Documents sample's demo (Samples/Documents): two devices, one conflict, resolved by keeping
/// both edits, with the stand-in engine and with the one `make demo-documents` picks.
@Suite("The Documents sample resolves a two-device conflict", .serialized)
struct DocumentsSampleTests {
    /// The sample's executable, built beside the test bundle.
    static var documents: String {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("documents").path
    }

    @Test(
        "documents demo: the conflict reaches both devices' presenters, and both edits end in one file",
        arguments: [["--stand-in"], []]
    )
    func demo(_ options: [String]) throws {
        let demo = try Subprocess(Self.documents, ["demo"] + options, captureStandardError: true)
        var lines: [String] = []
        while let line = demo.readLine(timeout: .seconds(60)) { lines.append(line) }
        let errors = demo.readStandardError()
        #expect(demo.wait(timeout: .seconds(30)) == .exited(0), "\(errors)")
        let output = lines.joined(separator: "\n")
        #expect(output.contains("laptop hears: a conflict arrived"), "\(output)")
        #expect(output.contains("desktop hears: a conflict arrived"), "\(output)")
        #expect(output.contains("laptop hears: the conflict"), "\(output)")  // marked resolved
        #expect(output.contains("desktop hears: the version"), "\(output)")  // gone on the other device
        #expect(lines.contains("  laptop: notes.md") && lines.contains("  desktop: notes.md"), "\(output)")
        #expect(
            lines.contains("  | Groceries: milk, eggs") && lines.contains("  | Groceries: milk, bread"),
            "\(output)"
        )
        #expect(!errors.contains("did not come"), "\(errors)")
    }
}
