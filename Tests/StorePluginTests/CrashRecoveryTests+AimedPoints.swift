// A short run of `make crash` (Tests/Crash/crash-trials.sh): one SIGKILL trial at each aimed
// point, the points spread over the three store types, each checked (the store opens, acknowledged saves are there, nothing
// partial, a second device converges), and one add with no randomness (`norandom`: it fails with
// reason noRandomness and saves nothing). The long runs are `make crash`.
import ConcordTestSupport
import Foundation
import Testing

/// Each aimed point of `make crash`, once, as part of the crash-recovery suite.
extension CrashRecoveryTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test(
        "Killed in a save, an export, an import, a checkpoint, a compaction, a join, or an add without randomness: the store reopens with every acknowledged save, nothing partial, and a second device converges"
    )
    func killedStoresRecover() throws {
        let directory = TemporaryDirectory("crash-smoke")
        let output = directory.url.appendingPathComponent("output").path
        _ = FileManager.default.createFile(atPath: output, contents: nil)
        let helper = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("ConcordCrashHelper").path
        var environment = ProcessInfo.processInfo.environment
        environment["CRASH_HELPER"] = helper
        environment["CRASH_TRIALS"] = "1"
        environment["CRASH_STORES"] = "sqlite json plist"
        environment["CRASH_POINTS_sqlite"] = "save checkpoint import unsynced"
        environment["CRASH_POINTS_json"] = "export compaction norandom"
        environment["CRASH_POINTS_plist"] = "save join"
        environment["CRASH_SEED"] = "16"
        let trials = try Subprocess(
            "/bin/bash",
            [Self.repository.appendingPathComponent("Tests/Crash/crash-trials.sh").path],
            environment: environment,
            standardOutputPath: output
        )
        let ended = trials.wait(timeout: .seconds(300)) ?? trials.terminate()
        let report = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        #expect(ended == .exited(0), "crash trials: \(ended.map(\.description) ?? "still running")\n\(report)")
        #expect(report.contains(", 0 failures"), "\(report)")
        // The aimed points were reached: a trial that was never killed proves nothing.
        let kills =
            report.split(separator: "\n").first { $0.contains("total:") }
            .flatMap { $0.split(separator: ",").dropFirst().first }
            .flatMap { Int($0.split(separator: " ").first ?? "") } ?? 0
        #expect(kills >= 5, "\(report)")
    }
}
