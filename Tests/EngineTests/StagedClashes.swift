import Foundation
import Testing

/// The three staged clashes, on a timeline relative to the run's start (fractions of its
/// length): a folder made and a note filed into it at once on each device (0.07); the desktop's
/// link to the laptop pauses (0.2); while paused, the laptop deletes a folder while
/// the desktop files a note into it, and both make a folder of the same name with a note in it
/// (0.25); the link resumes (0.55); the same two clashes again, connected, racing the engine (0.7).
struct StagedClashes {
    let ledger: Ledger
    let engine: any FileSyncEngine
    let laptop: EngineDevice
    let desktop: EngineDevice
    let start: Duration
    let length: Double
    /// Whether to stage the clashes (without them, only the pause).
    var clashes = true

    /// Runs the timeline; returns lines for the report, and what went wrong (also recorded as
    /// issues).
    func run() -> (report: [String], problems: [String]) {
        var report: [String] = []
        var problems: [String] = []
        wait(until: 0.07)
        if clashes {
            concurrently([
                { self.fileIntoNewFolder("Fresh-laptop", note: "staged-fresh-laptop", on: self.laptop) },
                { self.fileIntoNewFolder("Fresh-desktop", note: "staged-fresh-desktop", on: self.desktop) },
            ])
        }
        wait(until: 0.2)
        do {
            try engine.setLinkPaused(true)
            try engine.waitUntilConnected(false, timeout: .seconds(75))
            report.append("paused the desktop's link to the laptop at \(seconds(ledger.now))")
        } catch {
            problems.append("pausing the desktop's link failed: \(error)")
            Issue.record("pausing the desktop's link failed: \(error)")
        }
        wait(until: 0.25)
        if clashes { stageClashes(round: 1) }
        wait(until: 0.55)
        do {
            try engine.setLinkPaused(false)
            try engine.waitUntilConnected(true, timeout: .seconds(75))
            report.append("resumed at \(seconds(ledger.now))")
        } catch {
            problems.append("resuming the desktop's link failed: \(error)")
            Issue.record("resuming the desktop's link failed: \(error)")
        }
        wait(until: 0.7)
        if clashes { stageClashes(round: 2) }
        return (report, problems)
    }

    /// A folder deleted on the laptop while the desktop files a note into it; the same folder
    /// name made on both, each filing a note into it.
    private func stageClashes(round: Int) {
        concurrently([
            { self.ledger.run(.deleteFolder("Doomed-\(round)"), on: self.laptop, by: "stage") },
            {
                self.ledger.run(
                    .addNote(title: "staged-doomed-\(round)", folder: "Doomed-\(round)", tag: nil, pin: false),
                    on: self.desktop,
                    by: "stage"
                )
            },
            { self.fileIntoNewFolder("Twin-\(round)", note: "staged-twin-\(round)-laptop", on: self.laptop) },
            { self.fileIntoNewFolder("Twin-\(round)", note: "staged-twin-\(round)-desktop", on: self.desktop) },
        ])
    }

    /// Makes `folder` and at once files a note into it (the note goes to the folder of that name
    /// even when the other device made it first and the add is refused).
    private func fileIntoNewFolder(_ folder: String, note: String, on device: EngineDevice) {
        ledger.run(.addFolder(folder), on: device, by: "stage")
        ledger.run(.addNote(title: note, folder: folder, tag: nil, pin: false), on: device, by: "stage")
    }

    private func wait(until fraction: Double) {
        let target = start + .milliseconds(Int(length * fraction * 1000))
        let remaining = target - ledger.now
        if remaining > .zero {
            Thread.sleep(
                forTimeInterval: Double(remaining.components.seconds) + Double(remaining.components.attoseconds) / 1e18
            )
        }
    }

    /// Runs `bodies` on threads of their own at once; waits (bounded) for all.
    private func concurrently(_ bodies: [@Sendable () -> Void]) {
        let group = DispatchGroup()
        for body in bodies {
            group.enter()
            Thread.detachNewThread {
                body()
                group.leave()
            }
        }
        if group.wait(timeout: .now() + .seconds(150)) != .success {
            Issue.record("staged commands did not end within 150 s")
        }
    }
}
