import ConcordTestSupport
import FileCoordination
import Foundation
import Testing

/// The `concord` tool as a user meets it: a version, clear failures, data and status apart.
@Suite("concord tool behaviour")
struct ToolBehaviourTests {
    let directory = TemporaryDirectory("concord-tool")

    @Test("--version prints the package's version")
    func version() throws {
        let run = try ConcordRun.run(["--version"])
        #expect(run.status == 0)
        #expect(run.output.trimmingCharacters(in: .whitespacesAndNewlines) == Concord.version)
    }

    @Test("watch on a path that does not exist fails at once, on standard error, with a non-zero status")
    func watchMissingPath() throws {
        let missing = directory("not-there.txt")
        let run = try ConcordRun.run(["watch", missing.path], timeout: .seconds(30))
        #expect(run.status == 1)
        #expect(run.errors.contains(missing.path) && run.errors.contains("no such file"), "\(run.errors)")
        #expect(run.output.isEmpty)
    }

    @Test(
        "watch prints messages with ISO 8601 timestamps on standard output, status on standard error, and ends when the item is deleted"
    )
    func watchUntilDeleted() throws {
        let file = directory("watched.txt")
        try Data("one".utf8).write(to: file)
        let child = try Subprocess(ConcordRun.executable, ["watch", file.path], captureStandardError: true)
        let output = ConcordRun.Collected(child.standardOutput)
        let errors = ConcordRun.Collected(child.standardError!)
        defer { child.terminate() }
        #expect(errors.wait(for: "watching"), "the status line says it is ready")
        try FileCoordinator().removeItem(at: file)
        #expect(output.wait(for: "accommodatePresentedItemDeletion"))
        #expect(errors.wait(for: "was deleted"))
        #expect(child.wait(timeout: .seconds(20)) == .exited(0))
        let line = try #require(
            output.text().split(separator: "\n").first { $0.contains("accommodatePresentedItemDeletion") }
        )
        let stamp = String(line.prefix { $0 != " " })
        #expect(try Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(stamp) <= Date(), "\(line)")
        #expect(!output.text().contains("watching"), "status is not on standard output")
    }
}
