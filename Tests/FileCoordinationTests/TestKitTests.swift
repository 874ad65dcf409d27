import FileCoordination
import FileCoordinationTesting
import Foundation
import Testing

/// The adopters' test kit does what its documentation promises.
@Suite("FileCoordinationTesting")
struct TestKitTests {
    @Test("A child's line is waited for, the lines before it are returned, and terminate ends it")
    func waitForLineAndTerminate() throws {
        let child = try Subprocess("/bin/sh", ["-c", "echo starting; echo ready; exec sleep 60"])
        let found = child.waitForLine(timeout: .seconds(20)) { $0 == "ready" }
        #expect(found.line == "ready")
        #expect(found.lines == ["starting", "ready"])
        #expect(child.isRunning)
        #expect(child.terminate() == .signaled(SIGTERM))
        #expect(!child.isRunning)
    }

    @Test("A line that never comes ends the wait at its bound, and the end of output ends it at once")
    func boundedWaits() throws {
        let silent = try Subprocess("/bin/sh", ["-c", "exec sleep 60"])
        let start = ContinuousClock.now
        #expect(!silent.waitForLine("never", timeout: .milliseconds(200)))
        #expect(ContinuousClock.now - start < .seconds(10))

        let brief = try Subprocess("/bin/sh", ["-c", "echo only"])
        #expect(brief.readLine() == "only")
        #expect(brief.readLine(timeout: .seconds(20)) == nil)
        #expect(brief.wait(timeout: .seconds(20)) == .exited(0))
    }

    @Test("Standard error is captured when asked, and the exit status is reported")
    func standardError() throws {
        let child = try Subprocess("/bin/sh", ["-c", "echo oops >&2; exit 3"], captureStandardError: true)
        #expect(child.readStandardError() == "oops\n")
        #expect(child.wait(timeout: .seconds(20)) == .exited(3))
    }

    @Test("A program that does not exist fails to start with an error naming it")
    func spawnFailure() {
        #expect {
            _ = try Subprocess("/nonexistent/program", [])
        } throws: { error in
            (error as? Subprocess.SpawnError)?.description.contains("/nonexistent/program") == true
        }
    }

    @Test("A recording presenter's wait is bounded and says whether the messages came")
    func recordingPresenterWaits() throws {
        let folder = TemporaryDirectory("test-kit")
        let file = folder("doc.txt")
        let presenter = RecordingPresenter(file)
        FileCoordinator.addFilePresenter(presenter)
        defer { FileCoordinator.removeFilePresenter(presenter) }

        #expect(!presenter.wait(for: ["didChange"], timeout: .milliseconds(100)))
        try FileCoordinator().replaceContentsOfItem(at: file, with: Data("x".utf8))
        #expect(presenter.wait(for: ["relinquishToWriter", "reacquire"]))
    }
}
