import FolderStore
import Foundation
import Persistence
import RecipePolicies
import Testing

/// The recipe app's policies at work on a FolderStore: each test plays what two devices would
/// do, with an `.import` context standing in for the other device's changes arriving.
@Suite("Recipe policies")
struct RecipePoliciesTests {
    /// A coordinator with the app's policies and one FolderStore in a temporary folder.
    final class App {
        let folder: URL
        let coordinator: StoreCoordinator

        init() throws {
            folder = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("recipes-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let registry = StoreRegistry()
            registry.register(FolderStore.self)
            coordinator = StoreCoordinator(schema: RecipeModel.schema, registry: registry)
            RecipeModel.register(on: coordinator)
            try coordinator.addStore(ofType: FolderStore.storeType, at: folder.appendingPathComponent("recipes.folder"))
        }

        deinit {
            for store in coordinator.stores { coordinator.removeStore(store) }
            try? FileManager.default.removeItem(at: folder)
        }

        func context(_ origin: ChangeOrigin = .local, at seconds: Double = 1000) -> ObjectContext {
            RecipeModel.context(coordinator, origin: origin, now: { Date(timeIntervalSinceReferenceDate: seconds) })
        }

        func all(_ entity: String) throws -> [Record] {
            try context().fetch(FetchRequest(entity: entity, sortedBy: [.ascending("created")]))
        }
    }

    static func date(_ seconds: Double) -> Value { .date(Date(timeIntervalSinceReferenceDate: seconds)) }

    @Test("a local insert gets its dates and Uncategorized; an imported one is kept exactly as it arrived")
    func hooksKnowTheOrigin() throws {
        let app = try App()
        let local = app.context(at: 500)
        let soup = try local.insert(entity: "Recipe", values: ["title": "Soup"])
        try local.save()
        let stored = try #require(try app.context().record(with: soup.id))
        #expect(stored["created"] == Self.date(500) && stored["edited"] == Self.date(500))
        #expect(stored.toOne["category"] == RecipeModel.uncategorizedID)

        let arriving = app.context(.import, at: 900)
        let imported = Record(
            id: .random(entity: "Recipe"),
            values: ["title": "Stew", "servings": 4, "created": Self.date(10), "edited": Self.date(20)],
            toOne: ["category": RecipeModel.uncategorizedID]
        )
        try arriving.insert(imported)
        try arriving.save()
        #expect(
            try app.context().record(with: imported.id) == imported,
            "an import is applied with plain values: no hook stamped it"
        )

        let edit = app.context(at: 700)
        var changed = try #require(try edit.record(with: soup.id))
        changed["servings"] = 6
        try edit.update(changed)
        try edit.save()
        #expect(try app.context().record(with: soup.id)?["edited"] == Self.date(700), "a local edit is stamped")
    }

    @Test("two kitchens become one: the earliest created, on either order of arrival; the loser's units survive")
    func kitchenIsASingleton() throws {
        let early = Record(
            id: .deterministic(entity: "Kitchen", name: "desktop"),
            values: ["units": "metric", "created": Self.date(100)]
        )
        let late = Record(
            id: .deterministic(entity: "Kitchen", name: "laptop"),
            values: ["units": "imperial", "created": Self.date(200)]
        )
        for (mine, theirs) in [(late, early), (early, late)] {
            let app = try App()
            let local = app.context()
            try local.insert(mine)
            try local.save()
            let arriving = app.context(.import)
            try arriving.insert(theirs)
            try arriving.save()
            let kitchens = try app.all("Kitchen")
            #expect(kitchens.map(\.id) == [early.id], "the winner is the earliest created, whichever arrived first")
            #expect(kitchens.first?["units"] == "imperial", "the loser's non-default units were merged into the winner")
        }
    }

    @Test("categories named alike become one, holding both devices' recipes")
    func categoriesDeduplicateByName() throws {
        let app = try App()
        let local = app.context()
        let soups = try local.insert(entity: "Category", values: ["name": "Soups", "created": Self.date(300)])
        var mine = try local.insert(entity: "Recipe", values: ["title": "Minestrone"])
        mine.toOne["category"] = soups.id
        try local.update(mine)
        try local.save()

        let arriving = app.context(.import)
        let theirSoups = Record(id: .random(entity: "Category"), values: ["name": " soups", "created": Self.date(100)])
        let theirs = Record(
            id: .random(entity: "Recipe"),
            values: ["title": "Borscht", "servings": 2, "created": Self.date(1), "edited": Self.date(1)],
            toOne: ["category": theirSoups.id]
        )
        try arriving.insert(theirSoups)
        try arriving.insert(theirs)
        try arriving.save()

        let categories = try app.all("Category").filter { $0.id != RecipeModel.uncategorizedID }
        #expect(categories.map(\.id) == [theirSoups.id], "one category is left: the earliest created")
        let recipes = try app.all("Recipe")
        #expect(recipes.count == 2 && recipes.allSatisfy { $0.toOne["category"] == theirSoups.id }, "\(recipes)")
    }

    @Test("deleting a category repairs its recipes at the save: they move to Uncategorized")
    func missingCategoryIsRepaired() throws {
        let app = try App()
        let setup = app.context()
        let desserts = try setup.insert(entity: "Category", values: ["name": "Desserts", "created": Self.date(1)])
        var cake = try setup.insert(entity: "Recipe", values: ["title": "Cake"])
        cake.toOne["category"] = desserts.id
        try setup.update(cake)
        try setup.save()

        let edit = app.context()
        try edit.delete(desserts.id)
        try edit.save()
        #expect(try app.context().record(with: desserts.id) == nil)
        #expect(try app.context().record(with: cake.id)?.toOne["category"] == RecipeModel.uncategorizedID)
    }

    @Test("two writers change one recipe's servings: the later edit wins, whichever saves last")
    func newestEditWins() throws {
        for laterSavesFirst in [false, true] {
            let app = try App()
            let setup = app.context(at: 10)
            let recipe = try setup.insert(entity: "Recipe", values: ["title": "Curry"])
            try setup.save()

            let early = app.context(at: 100)
            let late = app.context(at: 200)
            var fromEarly = try #require(try early.record(with: recipe.id))
            var fromLate = try #require(try late.record(with: recipe.id))
            fromEarly["servings"] = 4
            fromEarly["title"] = "Green curry"
            fromLate["servings"] = 6
            try early.update(fromEarly)
            try late.update(fromLate)
            for context in laterSavesFirst ? [late, early] : [early, late] { try context.save() }

            let stored = try #require(try app.context().record(with: recipe.id))
            #expect(stored["servings"] == 6, "the later edit's servings win (later saves first: \(laterSavesFirst))")
            #expect(stored["title"] == "Green curry", "a property only one side changed keeps that side's value")
        }
    }
}
