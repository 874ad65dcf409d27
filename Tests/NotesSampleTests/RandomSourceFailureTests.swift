import ConcordTestSupport
import Foundation
import Persistence
import Testing

@testable import notes

/// Ids come from the kernel's random source, never from a descriptor that may not open: with
/// `/dev/urandom` refused (`EMFILE`, injected by strace), Foundation's `UUID()` returns one
/// constant, and each `notes add` silently replaced the note the previous one saved under it.
@Suite("Random source failure", .serialized)
struct RandomSourceFailureTests {
    let directory = TemporaryDirectory("random-source")

    /// Runs `notes ARGUMENTS` under strace with every `openat` of `/dev/urandom` failing with
    /// EMFILE; its exit status and standard error.
    func runWithoutURandom(_ arguments: [String]) throws -> (status: Int32, errors: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/strace")
        process.arguments =
            [
                "-f", "-qq", "-o", "/dev/null", "-P", "/dev/urandom", "-e", "trace=openat", "-e",
                "inject=openat:error=EMFILE", NotesProcess.executableURL.path,
            ] + arguments
        let errors = Pipe()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = errors
        process.standardInput = FileHandle.nullDevice
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        try process.run()
        let text = errors.fileHandleForReading.readDataToEndOfFile()
        #expect(ended.wait(timeout: .now() + .seconds(60)) == .success, "notes under strace did not end")
        return (process.terminationStatus, String(decoding: text, as: UTF8.self))
    }

    @Test(
        "two notes added while /dev/urandom cannot be opened are both kept, with the note saved before",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "needs strace (make deps)")
    )
    func addsKeptWithoutURandom() throws {
        let options = [
            "--store", "sqlite", "--data", directory("data").path, "--container", directory("container").path,
            "--device", "dev1",
        ]
        let kept = try NotesProcess.run(["add", "keep-me", "--create"] + options)
        #expect(kept.status == 0, "\(kept.errors)")
        for title in ["first", "second"] {
            let outcome = try runWithoutURandom(["add", title] + options)
            #expect(outcome.status == 0, "notes add \(title): \(outcome.errors)")
        }
        let listed = try NotesProcess.run(["list"] + options)
        let titles = listed.lines.compactMap { line in
            line.range(of: "title=\"").map { String(line[$0.upperBound...].prefix { $0 != "\"" }) }
        }
        #expect(titles.sorted() == ["first", "keep-me", "second"], "\(listed.lines)")
        let ids = Set(listed.lines.map { $0.split(separator: " ").dropFirst().first ?? "" })
        #expect(ids.count == 3 && !ids.contains("00000000"), "\(listed.lines)")
    }

    @Test("random ids are version 4 UUIDs and do not repeat")
    func randomIDs() {
        var seen = Set<UUID>()
        for _ in 0..<10_000 {
            let id = ObjectID.random(entity: "Note").uuid
            #expect(id.uuid.6 >> 4 == 4 && id.uuid.8 >> 6 == 0b10, "\(id)")
            seen.insert(id)
        }
        #expect(seen.count == 10_000)
        #expect(StoreMetadata.makeIdentifier() != StoreMetadata.makeIdentifier())
    }
}
