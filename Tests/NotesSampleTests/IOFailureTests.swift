import ConcordTestSupport
import Foundation
import Testing

@testable import notes

/// The sample's output when standard output fails: an error and a non-zero exit status, never a
/// trap, and the store closed as cleanly as after any other error.
@Suite("Notes output failures")
struct IOFailureTests {
    /// Runs `notes` with `arguments`, its standard output `/dev/full`; returns how it ended and
    /// what it wrote to standard error.
    func runToFullDevice(_ arguments: [String]) throws -> (Subprocess.Termination?, String) {
        let child = try Subprocess(
            NotesProcess.executableURL.path,
            arguments,
            captureStandardError: true,
            standardOutputPath: "/dev/full"
        )
        var errors = Data()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while case let count = read(child.standardError!, &chunk, chunk.count), count > 0 {
            errors.append(contentsOf: chunk[..<count])
        }
        return (child.wait(timeout: .seconds(60)), String(decoding: errors, as: UTF8.self))
    }

    @Test(
        "`notes list > /dev/full` and `notes add … > /dev/full` report the write failure and exit 1; the store is closed cleanly"
    )
    func standardOutputFull() throws {
        let directory = TemporaryDirectory("notes-full")
        let data = directory("data")
        let added = try NotesProcess.run(
            ["add", "Groceries", "--data", data.path, "--offline", "--create"],
            timeout: .seconds(60)
        )
        #expect(added.status == 0, "add: \(added)")

        for command in [["list"], ["add", "Errands"]] {
            let (ended, errors) = try runToFullDevice(command + ["--data", data.path, "--offline"])
            #expect(
                ended == .exited(1),
                "notes \(command.joined(separator: " ")) > /dev/full ended with \(ended.map(\.description) ?? "nothing within 60 s"); standard error: \(errors)"
            )
            #expect(errors.contains("cannot write to standard output"), "standard error: \(errors)")
            #expect(errors.contains("errno 28"), "the error names ENOSPC: \(errors)")
            // The store was closed on the way out: no -wal is left for the next launch to recover.
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: data.path).filter {
                $0.hasSuffix("-wal")
            }
            #expect(leftovers.isEmpty, "left behind: \(leftovers)")
        }

        // Both notes are there: the failed output did not lose the save before it.
        let listed = try NotesProcess.run(["list", "--data", data.path, "--offline"], timeout: .seconds(60))
        #expect(listed.status == 0)
        let titles = listed.lines.filter { $0.hasPrefix("note ") }
        #expect(titles.count == 2 && titles.contains { $0.contains("Errands") }, "listed: \(listed.lines)")
    }

    @Test(
        "a save whose folder fsync fails after the rename is saved, not failed: `notes add` exits 0 with a warning not to repeat it, and the note is there once"
    )
    func unconfirmedDurabilityIsNotAFailure() throws {
        let directory = TemporaryDirectory("notes-fsync")
        let data = directory("data-folder")
        let first = try NotesProcess.run(
            ["add", "Groceries", "--data", data.path, "--store", "json", "--offline", "--create"],
            timeout: .seconds(60)
        )
        #expect(first.status == 0, "add: \(first)")
        var environment = ProcessInfo.processInfo.environment
        environment["LD_PRELOAD"] = try FaultLibrary.build(in: directory)
        // The first fsync of the data folder itself (the store's commit, after its rename) fails
        // with EIO; the call is made first, as a disk that fails to confirm would.
        environment["CONCORD_CRASH_CALL"] = "fsync"
        environment["CONCORD_CRASH_SUFFIX"] = "/data-folder"
        environment["CONCORD_CRASH_WHEN"] = "after"
        environment["CONCORD_CRASH_FAIL"] = "5"
        let child = try Subprocess(
            NotesProcess.executableURL.path,
            ["add", "Errands", "--data", data.path, "--offline"],
            environment: environment,
            captureStandardError: true
        )
        var output: [String] = []
        while let line = child.readLine(timeout: .seconds(60)) { output.append(line) }
        let ended = child.wait(timeout: .seconds(60))
        let errors = child.readStandardError()
        #expect(ended == .exited(0), "ended \(ended.map(\.description) ?? "nothing"); \(output); \(errors)")
        #expect(output.contains { $0.hasPrefix("added note") }, "\(output)")
        #expect(errors.contains("could not confirm it is on disk") && errors.contains("errno 5"), "\(errors)")
        let listed = try NotesProcess.run(["list", "--data", data.path, "--offline"], timeout: .seconds(60))
        let titles = listed.lines.filter { $0.hasPrefix("note ") }
        #expect(titles.count == 2 && titles.filter { $0.contains("Errands") }.count == 1, "listed: \(listed.lines)")
    }
}
